import { describe, expect, it } from 'vitest';
import { EarlyRuns, type AheadRunner } from './early-runs.js';

type Input = { node: string; path: string };
const input: Input = { node: 'get', path: '/echo' };
const never = new AbortController().signal;

/** A runner that records what it was asked and answers `answer` (or fails with it). */
function recorder(answer: (input: Input) => Promise<string> = async (i) => `called ${i.path}`) {
  const calls: { input: Input; run: { workflowId: string; runId: string }; signal: AbortSignal }[] = [];
  const runner: AheadRunner<Input, string> = (i, run, signal) => {
    calls.push({ input: i, run, signal });
    return answer(i);
  };
  return { calls, runner };
}

describe('attempts run ahead of a run’s first call', () => {
  it('are run once Temporal has answered, and taken once, by the run, node and input they were run for', async () => {
    const runs = new EarlyRuns<Input, string>();
    const { calls, runner } = recorder();
    runs.serve(runner);
    const fill = runs.reserve('wf-1', 'get');
    expect(calls).toHaveLength(0);
    fill({ runId: 'run-1', input });
    await Promise.resolve();
    expect(calls.map((c) => [c.input, c.run])).toEqual([[input, { workflowId: 'wf-1', runId: 'run-1' }]]);
    expect(runs.take('wf-2', 'run-1', 'get', input, never)).toBeUndefined();
    expect(runs.take('wf-1', 'run-1', 'other', input, never)).toBeUndefined();
    const taken = await runs.take('wf-1', 'run-1', 'get', { ...input }, never);
    await expect(taken!.outcome).resolves.toBe('called /echo');
    // A retry of the call makes its own attempt.
    expect(runs.take('wf-1', 'run-1', 'get', input, never)).toBeUndefined();
    expect(runs.counts).toEqual({ taken: 1, differed: 0 });
    expect(runs.size).toBe(0);
  });

  it('hand a failed attempt to the activity, to throw for Temporal’s retry policy', async () => {
    const runs = new EarlyRuns<Input, string>();
    runs.serve(recorder(() => Promise.reject(new Error('HTTP 500'))).runner);
    runs.reserve('wf-1', 'get')({ runId: 'run-1', input });
    const taken = await runs.take('wf-1', 'run-1', 'get', input, never);
    await expect(taken!.outcome).rejects.toThrow('HTTP 500');
  });

  it('are compared with the input as the activity receives it, through JSON', async () => {
    const runs = new EarlyRuns<Record<string, unknown>, string>();
    runs.serve(async () => 'done');
    // An undefined field does not travel; key order does not matter.
    runs.reserve('wf-1', 'get')({ runId: 'run-1', input: { path: '/echo', node: 'get', inlineBytes: undefined } });
    const taken = await runs.take('wf-1', 'run-1', 'get', { node: 'get', path: '/echo' }, never);
    await expect(taken!.outcome).resolves.toBe('done');
  });

  it('are taken by an activity given another input too, so the call is not made twice, and the difference is told', async () => {
    const told: string[] = [];
    const runs = new EarlyRuns<Input, string>((workflowId, nodeId) => told.push(`${workflowId}/${nodeId}`));
    const { calls, runner } = recorder();
    runs.serve(runner);
    runs.reserve('wf-1', 'get')({ runId: 'run-1', input });
    const taken = await runs.take('wf-1', 'run-1', 'get', { ...input, path: '/other' }, never);
    await expect(taken!.outcome).resolves.toBe('called /echo');
    expect(calls).toHaveLength(1);
    expect(runs.counts).toEqual({ taken: 0, differed: 1 });
    expect(told).toEqual(['wf-1/get']);
  });

  it('are run with the input as the activity will receive it', async () => {
    const runs = new EarlyRuns<Record<string, unknown>, string>();
    const { calls, runner } = recorder();
    runs.serve(runner as unknown as AheadRunner<Record<string, unknown>, string>);
    runs.reserve('wf-1', 'get')({ runId: 'run-1', input: { node: 'get', path: '/echo', at: new Date(0), gone: undefined } });
    await Promise.resolve();
    expect(calls[0]!.input).toEqual({ node: 'get', path: '/echo', at: '1970-01-01T00:00:00.000Z' });
  });

  it('are cancelled with the activity that took them', async () => {
    const runs = new EarlyRuns<Input, string>();
    runs.serve((_i, _run, signal) => new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason))));
    runs.reserve('wf-1', 'get')({ runId: 'run-1', input });
    const activity = new AbortController();
    const taken = await runs.take('wf-1', 'run-1', 'get', input, activity.signal);
    activity.abort(new Error('the run was cancelled'));
    await expect(taken!.outcome).rejects.toThrow('the run was cancelled');
  });

  it('wait for the API when the activity asks before the API has heard from Temporal', async () => {
    const runs = new EarlyRuns<Input, string>();
    runs.serve(recorder().runner);
    const fill = runs.reserve('wf-1', 'get');
    const taken = runs.take('wf-1', 'run-1', 'get', input, never);
    let settled = false;
    void taken!.then(() => (settled = true));
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(settled).toBe(false);
    fill({ runId: 'run-1', input });
    await expect((await taken)!.outcome).resolves.toBe('called /echo');
  });

  it('are left to the activity when none was run: not eager, no worker serving, another run', async () => {
    const runs = new EarlyRuns<Input, string>();
    // No worker serves yet: the place is filled with nothing.
    runs.reserve('wf-0', 'get')({ runId: 'run-0', input });
    expect(runs.take('wf-0', 'run-0', 'get', input, never)).toBeUndefined();
    const { calls, runner } = recorder();
    runs.serve(runner);
    runs.reserve('wf-1', 'get')();
    expect(runs.take('wf-1', 'run-1', 'get', input, never)).toBeUndefined();
    runs.reserve('wf-2', 'get')({ runId: 'run-2', input });
    await expect(runs.take('wf-2', 'run-other', 'get', input, never)).resolves.toBeUndefined();
    expect(calls).toHaveLength(1);
    expect(runs.size).toBe(0);
  });

  it('are forgotten when nobody takes them', () => {
    let now = 0;
    const runs = new EarlyRuns<Input, string>(undefined, 1_000, () => now);
    runs.serve(recorder().runner);
    runs.reserve('wf-1', 'get')({ runId: 'run-1', input });
    now = 1_500;
    runs.reserve('wf-2', 'get');
    expect(runs.size).toBe(1);
    expect(runs.take('wf-1', 'run-1', 'get', input, never)).toBeUndefined();
  });
});
