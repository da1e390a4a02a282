import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NODE_REFUSALS } from '../workflows/defs.js';
import { ERROR_CODES, type ErrorCode } from '../workflows/error-codes.js';
import { toFailure } from '../activities/graph.activities.js';
import { ApplicationFailure } from '@temporalio/activity';
import { AppError } from '../src/platform/errors.js';
import { startTestApp, type TestApp } from './helpers/app.js';

/**
 * One list of node error codes decides what Temporal retries: an unexpected error is retried
 * under the node's retry policy, a refusal never is.
 */
let app: TestApp;
const W = '/api/workflow/v1/workflows';

beforeAll(async () => {
  // A small heap for expression threads, so that the memory test below reaches it well within the deadline.
  // A deadline generous enough that on a busy machine the memory test reaches its heap cap first.
  app = await startTestApp({ worker: true, env: { SVC_EXPRESSION_MEMORY_MB: '24', SVC_EXPRESSION_TIMEOUT_MS: '5000' } });
  const entity = await app.admin.post('/api/management/v1/entities', {
    slug: 'lead',
    name: 'Lead',
    schema: { fields: { name: { type: 'string', required: true }, score: { type: 'integer' } } },
  });
  expect(entity.status, entity.text).toBe(201);
});
afterAll(async () => {
  await app?.close();
});

async function runOnce(node: Record<string, unknown>) {
  const created = await app.admin.post(W, { title: `errors ${Math.random()}`, trigger: { type: 'manual' }, nodes: [{ id: 'save', ...node }], edges: [] });
  expect(created.status, created.text).toBe(201);
  const res = await app.admin.post(`${W}/${created.body.data.id}/run?wait=true&timeout_ms=60000`, { payload: {} });
  expect(res.status, res.text).toBe(200);
  return (await app.admin.get(`/api/workflow/v1/executions/${res.body.data.execution_id}`)).body.data;
}

describe('node error classification', () => {
  it('has one list: refusals are exactly the codes the catalogue marks as not retried', () => {
    expect([...NODE_REFUSALS].sort()).toEqual(
      (Object.keys(ERROR_CODES) as ErrorCode[]).filter((c) => (ERROR_CODES[c] as { retried?: unknown }).retried === false).sort(),
    );
    expect(NODE_REFUSALS).not.toContain('node_failed');
  });

  it('classifies what nodes throw', () => {
    const unexpected = toFailure(new TypeError('socket hang up')) as ApplicationFailure;
    expect([unexpected.type, unexpected.nonRetryable]).toEqual(['node_failed', false]);
    const refusal = toFailure(new AppError('validation_failed', 'bad')) as ApplicationFailure;
    expect([refusal.type, refusal.nonRetryable]).toEqual(['validation_failed', true]);
    const outage = toFailure(new AppError('service_unavailable', 'down')) as ApplicationFailure;
    expect(outage.nonRetryable).toBe(false);
    // A refusal code thrown as retryable is made final.
    const flagged = toFailure(ApplicationFailure.retryable('gone', 'connection_missing')) as ApplicationFailure;
    expect(flagged.nonRetryable).toBe(true);
  });

  it('retries an unexpected error under the node retry policy, then succeeds', async () => {
    const records = app.stack.services.records;
    const real = records.create.bind(records);
    let calls = 0;
    records.create = (async (...args: Parameters<typeof real>) => {
      if (++calls <= 2) throw new Error('connection reset by peer');
      return real(...args);
    }) as typeof records.create;
    try {
      const execution = await runOnce({
        type: 'record_create',
        config: { entity: 'lead', fields: { name: 'Ada' } },
        retry: { max_attempts: 3, initial_interval_ms: 100 },
      });
      expect(execution.status).toBe('success');
      expect(execution.timeline[0]).toMatchObject({ status: 'success', attempts: 3 });
    } finally {
      records.create = real;
    }
  });

  it('gives up on an unexpected error after max_attempts with node_failed', async () => {
    const records = app.stack.services.records;
    const real = records.create.bind(records);
    let calls = 0;
    records.create = (async () => {
      calls++;
      throw new Error('connection reset by peer');
    }) as typeof records.create;
    try {
      const execution = await runOnce({
        type: 'record_create',
        config: { entity: 'lead', fields: { name: 'Ada' } },
        retry: { max_attempts: 2, initial_interval_ms: 100 },
      });
      expect(execution).toMatchObject({ status: 'failed', error: { code: 'node_failed', node_id: 'save' } });
      expect(execution.timeline[0]).toMatchObject({ status: 'failed', attempts: 2 });
      expect(calls).toBe(2);
    } finally {
      records.create = real;
    }
  });

  it('does not retry a refusal, whatever the retry policy', async () => {
    const execution = await runOnce({
      type: 'record_create',
      config: { entity: 'lead', fields: { score: 'lots' } },
      retry: { max_attempts: 5, initial_interval_ms: 100 },
    });
    expect(execution).toMatchObject({ status: 'failed', error: { code: 'validation_failed' } });
    expect(execution.timeline[0]).toMatchObject({ attempts: 1 });
  });
});

describe('expressions a hostile editor writes', () => {
  /** How many answers /healthz gave while `work` ran, asking every 20 ms. */
  async function healthAnswersDuring(work: Promise<unknown>): Promise<number> {
    let answers = 0;
    let done = false;
    void work.finally(() => (done = true));
    while (!done) {
      const asked = app.anonymous.get('/healthz').then((r) => r.status === 200 && answers++);
      await Promise.race([asked, new Promise((r) => setTimeout(r, 20))]);
      await asked;
    }
    return answers;
  }

  it('a regular expression that backtracks without end fails its node with expression_limit, and the API keeps answering', async () => {
    const run = runOnce({ type: 'transform', config: { value: `{{ $contains('${'a'.repeat(40)}!', /^(a+)+$/) }}` } });
    const answers = await healthAnswersDuring(run);
    const execution = await run;
    expect(execution.status).toBe('failed');
    expect(execution.timeline[0]).toMatchObject({ status: 'failed', attempts: 1, error: { code: 'expression_limit' } });
    expect(execution.timeline[0].error.message).toMatch(/longer than 5000 ms/);
    // The evaluation took five seconds; a stalled event loop would have answered once or never.
    expect(answers).toBeGreaterThan(10);
  });

  it('an expression that outgrows its memory fails its node, not the process; the same worker runs the next node', async () => {
    const execution = await runOnce({
      type: 'transform',
      // A hundred thousand arrays of 52 strings: far more than 24 MiB.
      config: { value: '{{ $count($map([1..99999], function($v) { $split("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz", "") })) }}' },
    });
    expect(execution.timeline[0]).toMatchObject({ status: 'failed', attempts: 1, error: { code: 'expression_limit' } });
    expect(execution.timeline[0].error.message).toMatch(/MiB of memory/);
    const next = await runOnce({ type: 'transform', config: { value: '{{ $sort([3, 1, 2]) }}' } });
    expect(next).toMatchObject({ status: 'success', output: [1, 2, 3] });
  });
});
