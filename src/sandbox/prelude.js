// The ctx bridge, script side: shapes the host functions (bridge.rs) into the spec's `ctx`
// object and defines the global `ctxTarget`. Every rule is enforced by the host; this only
// arranges calls. A module compiled once a process (bytecode.rs) and loaded once a sandbox; its
// default export, called at the start of each call, returns the script's own ctx (handle 0).
//
// QuickJS spends a few microseconds on each function it creates, so it has as few functions as it
// can: the live views are compiled on first use (views.js), and `console` and the start of the
// script are host functions.
//
// ctx.args                 a frozen copy (args are set once)
// ctx.locals, .nonlocals,  live views: each read asks the host, each assignment is
// ctx.globals, .run        ctx.manager.set(path, value) (objects are views; arrays are copies)
// ctx.envelope             { id, parent (an id), hasOtherTarget, target (a ctx) }
// ctx.manager              invoke, next, finish, fail, abort, get, set, inject, refresh, log,
//                          tail, configure
export default function (host) {
  'use strict';
  const OPS = ['invoke', 'next', 'finish', 'fail', 'abort', 'get', 'set', 'inject', 'refresh',
    'log', 'tail', 'configure'];
  const VIEWS = ['locals', 'nonlocals', 'globals', 'run'];
  const made = [];
  const handles = new WeakMap();
  let views;

  function ctxFor(h) {
    if (made[h] !== undefined) return made[h];
    const manager = {};
    for (const op of OPS) {
      manager[op] = function (a, b, c) { return host[op](h, a, b, c); };
    }
    const envelope = host.envelope(h);
    Object.defineProperty(envelope, 'target', { get() { return ctxFor(host.target(h)); } });
    let args;
    const ctx = {};
    Object.defineProperty(ctx, 'envelope', { value: Object.freeze(envelope), enumerable: true });
    Object.defineProperty(ctx, 'args', { get() { return args ??= host.args(h); }, enumerable: true });
    for (const path of VIEWS) {
      Object.defineProperty(ctx, path, {
        get() { views ??= host.views(); return views(host, h, path); },
        enumerable: true,
      });
    }
    Object.defineProperty(ctx, 'manager', { value: Object.freeze(manager) });
    made[h] = Object.freeze(ctx);
    handles.set(ctx, h);
    return ctx;
  }

  globalThis.ctxTarget = function ctxTarget(ctx) {
    const h = handles.get(ctx);
    if (h === undefined) throw new TypeError('ctxTarget(ctx) expects the ctx a skill was given');
    return ctxFor(host.ctxTarget(h));
  };

  return ctxFor(0);
}
