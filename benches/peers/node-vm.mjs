// The peer of `cargo bench --bench sandbox` in Node's own `node:vm`: each call makes a fresh
// context, runs the same skill body in it (`await ctx.manager.invoke('noop')`, the host
// answering at once) and returns. One call at a time (p50, p99) and 100 started together (the
// batch's time divided by 100, and calls a second), as the sandbox bench prints them.
//
//   node benches/peers/node-vm.mjs [seconds]      (default 10 per phase)
//
// `node:vm` is not a security boundary (its docs say so); it is the cheapest fresh-context
// peer a JavaScript host has, which is why #37 measures against it.
import vm from 'node:vm';
import os from 'node:os';

const secs = Number(process.argv[2] ?? 10);
const SOURCE = `(async function (ctx) {\n  await ctx.manager.invoke('noop');\n})`;
const script = new vm.Script(SOURCE);

async function call() {
  const context = vm.createContext({});
  const skill = script.runInContext(context);
  const ctx = { manager: { invoke: async (name) => name === 'noop' } };
  return skill(ctx);
}

function pct(sorted, p) {
  const i = Math.min(sorted.length, Math.max(1, Math.ceil(sorted.length * p))) - 1;
  return sorted[i];
}

async function oneAtATime() {
  const times = [];
  const end = performance.now() + secs * 1000;
  while (performance.now() < end) {
    const start = performance.now();
    await call();
    times.push((performance.now() - start) * 1000);
  }
  times.sort((a, b) => a - b);
  return { p50: pct(times, 0.5), p99: pct(times, 0.99), n: times.length };
}

async function hundredAtOnce() {
  let calls = 0;
  const start = performance.now();
  const end = start + secs * 1000;
  while (performance.now() < end) {
    await Promise.all(Array.from({ length: 100 }, call));
    calls += 100;
  }
  const us = ((performance.now() - start) * 1000) / calls;
  return { perCall: us, perSecond: 1e6 / us };
}

// Warm up the JIT as criterion warms up the sandbox bench.
for (let i = 0; i < 2000; i++) await call();
const one = await oneAtATime();
const many = await hundredAtOnce();
console.log(`node ${process.version} node:vm, fresh context per call, on ${os.cpus()[0].model}`);
console.log(`one at a time: p50 ${one.p50.toFixed(1)} us, p99 ${one.p99.toFixed(1)} us (${one.n} calls)`);
console.log(`100 at once: ${many.perCall.toFixed(1)} us a call, ${many.perSecond.toFixed(0)} calls/s`);
