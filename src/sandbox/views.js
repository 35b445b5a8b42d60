// Live views of ctx.locals, .nonlocals, .globals and .run (compiled the first time a script reads
// one of them in a call). A view is a Proxy: reading a key asks the host for `path.key` (an
// object comes back as a view of it, anything else as a value), assigning a key is
// ctx.manager.set(`path.key`, value), and `in`, Object.keys, spreading and JSON.stringify see the
// current keys.
0, function view(host, h, path) {
  'use strict';
  const own = Object.prototype.hasOwnProperty;
  const isPlain = function (v) { return v !== null && typeof v === 'object' && !Array.isArray(v); };
  const at = function (key) { return path + '.' + key; };
  const read = function () { return host.get(h, path); };
  const wrap = function (p, v) { return isPlain(v) ? view(host, h, p) : v; };
  const handler = {};
  handler.get = function (_, key) {
    return typeof key === 'string' ? wrap(at(key), host.get(h, at(key))) : undefined;
  };
  handler.set = function (_, key, value) {
    if (typeof key !== 'string') return false;
    host.set(h, at(key), value);
    return true;
  };
  handler.has = function (_, key) {
    const v = read();
    return typeof key === 'string' && isPlain(v) && own.call(v, key);
  };
  handler.ownKeys = function () {
    const v = read();
    return isPlain(v) ? Object.keys(v) : [];
  };
  handler.getOwnPropertyDescriptor = function (_, key) {
    const v = read();
    if (typeof key !== 'string' || !isPlain(v) || !own.call(v, key)) return undefined;
    return { value: wrap(at(key), v[key]), writable: true, enumerable: true, configurable: true };
  };
  handler.deleteProperty = function (_, key) {
    throw new TypeError('cannot delete ' + at(String(key)) + ': use ctx.manager.set(path, null)');
  };
  handler.defineProperty = function () {
    throw new TypeError('cannot define properties on ' + path + ': assign them');
  };
  return new Proxy({}, handler);
}
