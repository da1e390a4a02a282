import { describe, expect, it } from 'vitest';
import { RunStillOpen } from './reset-point.js';
import { resetPointFailure } from './replay.js';

describe('why a reset point could not be read', () => {
  it('says a run Temporal has not closed yet is still running', () => {
    const failure = resetPointFailure(new RunStillOpen('wf', 'run'), 7);
    expect(failure).toMatchObject({ code: 'execution_running', status: 409 });
    expect((failure as Error).message).toMatch(/Temporal has not closed the run of execution 7 yet/);
  });

  it('takes a history past retention as no reset point at all (the replay is then a new run)', () => {
    const notFound = Object.assign(new Error('not found'), { code: 5, details: 'workflow execution not found' });
    expect(resetPointFailure(notFound, 7)).toBeUndefined();
  });

  it('passes any other error on as it is', () => {
    const other = new Error('boom');
    expect(resetPointFailure(other, 7)).toBe(other);
    const unavailable = Object.assign(new Error('unavailable'), { code: 14, details: 'connection refused' });
    expect(resetPointFailure(unavailable, 7)).toBe(unavailable);
  });
});
