import { afterAll, describe, expect, it } from 'vitest';
import { ExpressionLimitError, ExpressionSandbox } from '../src/nodes/expression-sandbox.js';

/**
 * What an expression may cost: the sandbox's deadline, heap and result limits, and its pool of
 * threads. These wait out real deadlines (a second each) on real threads, so they run with the
 * integration suites; what templates mean is tested beside the code (src/nodes/expressions.test.ts).
 */
const context = {
  trigger: { since: '2026-01-01', n: 3, name: 'Ada' },
  nodes: { fetch: { body: { count: 12, items: [1, 2] } } },
  execution: { id: 1, workflow_id: 2 },
};

const sandbox = new ExpressionSandbox({ threads: 2, timeoutMs: 1000, memoryMb: 64, resultBytes: 512 * 1024 });
afterAll(() => sandbox.close());
const resolve = (template: unknown) => sandbox.resolve(template, context);

/** How often a 10 ms timer of the main thread fired while `work` ran: a stalled event loop fires none. */
async function ticksDuring(work: Promise<unknown>): Promise<number> {
  let ticks = 0;
  const timer = setInterval(() => ticks++, 10);
  await work.catch(() => undefined);
  clearInterval(timer);
  return ticks;
}

describe('what an expression may cost', () => {
  it('a regular expression that backtracks without end is stopped at the deadline, and the event loop never stalls', async () => {
    const started = Date.now();
    const evaluation = resolve(`{{ $contains('${'a'.repeat(40)}!', /^(a+)+$/) }}`);
    const ticks = await ticksDuring(evaluation);
    await expect(evaluation).rejects.toBeInstanceOf(ExpressionLimitError);
    await expect(evaluation).rejects.toThrow(/longer than 1000 ms/);
    expect(Date.now() - started).toBeLessThan(5000);
    // About a hundred ticks in a second; a stalled loop gets one or none.
    expect(ticks).toBeGreaterThan(20);
    // The pool goes on with a fresh thread.
    expect(await resolve('{{ 1 + 1 }}')).toBe(2);
  });

  it('runaway recursion and endless sequences are limits too', async () => {
    await expect(resolve('{{ ( $f := function($n) { $f($n + 1) }; $f(0) ) }}')).rejects.toBeInstanceOf(ExpressionLimitError);
    await expect(resolve('{{ $count([1..1000000]) }}')).rejects.toThrow(/too long a sequence/);
  });

  it('an expression that outgrows the heap ends the evaluation, not the process', async () => {
    const small = new ExpressionSandbox({ threads: 1, timeoutMs: 20_000, memoryMb: 16, resultBytes: 512 * 1024 });
    try {
      // Ninety thousand strings of a kilobyte each: some 90 MiB in a 16 MiB heap.
      const huge = small.resolve('{{ $count($map([1..90000], function($v) { $pad("", 1000, "y") & $string($v) })) }}', context);
      await expect(huge).rejects.toBeInstanceOf(ExpressionLimitError);
      await expect(huge).rejects.toThrow(/more than 16 MiB/);
      expect(await small.resolve('{{ $sum([1, 2, 3]) }}', context)).toBe(6);
    } finally {
      await small.close();
    }
  });

  it('a result larger than a node may hold is refused in the thread, before it is sent back', async () => {
    await expect(resolve('{{ $pad("x", 200000000) }}')).rejects.toThrow(/larger than 524288 bytes/);
    expect(await resolve('{{ $length($pad("x", 200000)) }}')).toBe(200000);
  });

  it('two slow expressions do not hold up a third beyond the pool', async () => {
    const slow = `{{ $contains('${'a'.repeat(40)}!', /^(a+)+$/) }}`;
    const [a, b, c] = await Promise.allSettled([resolve(slow), resolve(slow), resolve('{{ trigger.n * 2 }}')]);
    expect(a.status).toBe('rejected');
    expect(b.status).toBe('rejected');
    expect(c).toEqual({ status: 'fulfilled', value: 6 });
  });

  it('a thread sees none of the service’s environment', async () => {
    expect(await resolve('{{ $string($eval("1+1")) }}')).toBe('2');
    await expect(resolve('{{ $eval("process") }}')).resolves.toBeUndefined();
  });
});
