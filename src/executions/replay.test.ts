import { describe, expect, it } from 'vitest';
import { AppError } from '../platform/errors.js';
import { RunStillOpen } from './reset-point.js';
import { replayMode, replaySeed, resetPointFailure } from './replay.js';

describe('the kind of replay a request asks for', () => {
  it('reruns the whole run, reruns seeded from a node with a payload, or resets to a node', () => {
    expect(replayMode({})).toBe('rerun');
    expect(replayMode({ with_payload: { a: 1 } })).toBe('rerun');
    expect(replayMode({ from_node_id: 'b', with_payload: null })).toBe('rerun_seeded');
    expect(replayMode({ from_node_id: 'b' })).toBe('reset');
  });
});

describe('the seed of a rerun from a node', () => {
  const timeline = [
    { node_id: 'a', status: 'success', output: { n: 1 } },
    { node_id: 'skip', status: 'skipped', output: null },
    { node_id: 'c', status: 'success', output: 'c-out' },
    { node_id: 'bad', status: 'failed', output: null },
  ];

  it("holds the upstream nodes' recorded outputs only, a skipped node needing none", () => {
    expect(replaySeed(timeline, new Set(['a', 'skip']), 7)).toEqual({ a: { n: 1 } });
  });

  it('refuses an upstream node that neither succeeded nor was skipped', () => {
    const refusal = () => replaySeed(timeline, new Set(['a', 'bad']), 7);
    expect(refusal).toThrow(AppError);
    expect(refusal).toThrow('Upstream node bad has no recorded output in execution 7');
    expect(() => replaySeed(timeline, new Set(['never']), 7)).toThrow(expect.objectContaining({ code: 'node_not_run', status: 409 }));
  });
});

describe('why a reset point could not be read', () => {
  it('says a run Temporal has not closed yet is still running', () => {
    const failure = resetPointFailure(new RunStillOpen('wf', 'run'), 7);
    expect(failure).toMatchObject({ code: 'execution_running', status: 409 });
    expect((failure as Error).message).toMatch(/Temporal has not closed the run of execution 7 yet/);
  });

  it('says a history past retention is gone, and suggests with_payload', () => {
    const notFound = Object.assign(new Error('not found'), { code: 5, details: 'workflow execution not found' });
    expect(resetPointFailure(notFound, 7)).toMatchObject({ code: 'node_not_run', message: expect.stringContaining('with_payload') });
  });

  it('passes any other error on as it is', () => {
    const other = new Error('boom');
    expect(resetPointFailure(other, 7)).toBe(other);
    const unavailable = Object.assign(new Error('unavailable'), { code: 14, details: 'connection refused' });
    expect(resetPointFailure(unavailable, 7)).toBe(unavailable);
  });
});
