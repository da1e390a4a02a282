import { describe, expect, it } from 'vitest';
import { EarlyClaims } from './early-claims.js';

describe('claims made ahead of a run’s first call', () => {
  it('are taken once, by the run and node they were made for', async () => {
    const claims = new EarlyClaims<string>();
    claims.reserve('wf-1', 'get')({ runId: 'run-1', claim: Promise.resolve('claimed') });
    expect(claims.take('wf-2', 'run-1', 'get')).toBeUndefined();
    expect(claims.take('wf-1', 'run-1', 'other')).toBeUndefined();
    await expect(claims.take('wf-1', 'run-1', 'get')).resolves.toBe('claimed');
    // A retry of the call counts its own attempt.
    expect(claims.take('wf-1', 'run-1', 'get')).toBeUndefined();
    expect(claims.size).toBe(0);
  });

  it('wait for the API when the run’s activity asks before the API has heard from Temporal', async () => {
    const claims = new EarlyClaims<string>();
    const fill = claims.reserve('wf-1', 'get');
    const taken = claims.take('wf-1', 'run-1', 'get');
    expect(taken).toBeDefined();
    let settled = false;
    void taken!.then(() => (settled = true));
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(settled).toBe(false);
    fill({ runId: 'run-1', claim: Promise.resolve('claimed') });
    await expect(taken).resolves.toBe('claimed');
  });

  it('leave the claim to the taker when the API made none, or made it for another run', async () => {
    const claims = new EarlyClaims<string>();
    const taken = claims.take('wf-1', 'run-1', 'get');
    expect(taken).toBeUndefined();
    const fill = claims.reserve('wf-1', 'get');
    const waiting = claims.take('wf-1', 'run-1', 'get');
    fill();
    await expect(waiting).resolves.toBeUndefined();
    // A place the API left empty is forgotten at once.
    claims.reserve('wf-2', 'get')();
    expect(claims.size).toBe(0);
    claims.reserve('wf-3', 'get')({ runId: 'run-other', claim: Promise.resolve('claimed') });
    await expect(claims.take('wf-3', 'run-3', 'get')).resolves.toBeUndefined();
  });

  it('hand a failed claim to its taker without failing the process', async () => {
    const claims = new EarlyClaims<string>();
    const unhandled: unknown[] = [];
    const listener = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', listener);
    try {
      claims.reserve('wf-1', 'get')({ runId: 'run-1', claim: Promise.reject(new Error('the database went away')) });
      await new Promise((resolve) => setTimeout(resolve, 10));
      await expect(claims.take('wf-1', 'run-1', 'get')).rejects.toThrow('the database went away');
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', listener);
    }
  });

  it('are forgotten when nobody took them for a while, the oldest first', async () => {
    let now = 0;
    const claims = new EarlyClaims<string>(1_000, () => now);
    const made = (runId: string) => ({ runId, claim: Promise.resolve(runId) });
    claims.reserve('wf-1', 'get')(made('run-1'));
    now = 600;
    claims.reserve('wf-2', 'get')(made('run-2'));
    now = 1_200;
    claims.reserve('wf-3', 'get')(made('run-3'));
    expect(claims.size).toBe(2);
    expect(claims.take('wf-1', 'run-1', 'get')).toBeUndefined();
    await expect(claims.take('wf-2', 'run-2', 'get')).resolves.toBe('run-2');
  });
});
