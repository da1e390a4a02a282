import { describe, expect, it } from 'vitest';
import { LocalGate } from './local-gate.js';

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}
const tick = () => new Promise((r) => setTimeout(r, 0));

describe('LocalGate', () => {
  it('holds local results until the last local lands, then releases them in the order asked', async () => {
    const gate = new LocalGate();
    const [a, b, c] = [deferred<string>(), deferred<string>(), deferred<string>()];
    const seen: string[] = [];
    for (const [name, d] of [
      ['a', a],
      ['b', b],
      ['c', c],
    ] as const)
      void gate.local(() => d.promise).then((v) => seen.push(`${name}:${v}`));
    c.resolve('3');
    a.resolve('1');
    await tick();
    expect(seen).toEqual([]);
    b.resolve('2');
    await tick();
    expect(seen).toEqual(['a:1', 'b:2', 'c:3']);
  });

  it('holds other results while a local is in flight, and lets them through when none is', async () => {
    const gate = new LocalGate();
    const local = deferred<number>();
    const timer = deferred<number>();
    const seen: string[] = [];
    void gate.other(() => timer.promise).then(() => seen.push('timer'));
    void gate.local(() => local.promise).then(() => seen.push('local'));
    timer.resolve(1);
    await tick();
    expect(seen).toEqual([]);
    local.resolve(2);
    await tick();
    expect(seen).toEqual(['timer', 'local']);
    const later = deferred<number>();
    void gate.other(() => later.promise).then(() => seen.push('later'));
    later.resolve(3);
    await tick();
    expect(seen).toEqual(['timer', 'local', 'later']);
  });

  it('releases failures in their place too', async () => {
    const gate = new LocalGate();
    const [a, b] = [deferred<number>(), deferred<number>()];
    const seen: string[] = [];
    void gate.local(() => a.promise).catch((e: Error) => seen.push(`a failed: ${e.message}`));
    void gate.local(() => b.promise).then(() => seen.push('b'));
    b.resolve(1);
    a.reject(new Error('boom'));
    await tick();
    expect(seen).toEqual(['a failed: boom', 'b']);
  });
});
