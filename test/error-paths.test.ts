import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';

let app: TestApp;
let target: HttpTarget;
let connectionId: number;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';

beforeAll(async () => {
  // A small output limit, so an error body larger than it is cut.
  app = await startTestApp({ worker: true, env: { SVC_NODE_OUTPUT_LIMIT: '16kb' } });
  target = await startHttpTarget((req) => {
    if (req.url.startsWith('/pay')) return { status: 402, body: { error: 'card declined', card: '4242' } };
    if (req.url.startsWith('/huge')) return { status: 400, body: 'x'.repeat(40_000) };
    return undefined;
  });
  const conn = await app.admin.post('/api/workflow/v1/connections', {
    type: 'http_bearer',
    label: 'target',
    cred: 'tok-errors',
    extra: { base_url: target.url },
  });
  connectionId = conn.body.data.id;
});
afterAll(async () => {
  await app?.close();
  await target?.close();
});

async function create(def: Record<string, unknown>, as = app.admin) {
  const res = await as.post(W, { title: `errors ${Math.random()}`, trigger: { type: 'manual' }, edges: [], ...def });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function run(workflowId: number, payload: unknown = {}) {
  const res = await app.admin.post(`${W}/${workflowId}/run?wait=true&timeout_ms=90000`, { payload });
  expect(res.status, res.text).toBe(200);
  return res.body.data as { execution_id: number; status: string; output: unknown; error: any };
}

async function view(executionId: number, as = app.admin) {
  const res = await as.get(`${E}/${executionId}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

const settled = (executionId: number) =>
  eventually(
    async () => {
      const v = await view(executionId);
      return v.status !== 'running' ? v : undefined;
    },
    90_000,
    `execution ${executionId} to end`,
  );

const nodeOf = (execution: { timeline: { node_id: string }[] }, id: string) => execution.timeline.find((t) => t.node_id === id) as any;

const pay = (extra: Record<string, unknown> = {}) => ({
  id: 'pay',
  type: 'http_request',
  connection_id: connectionId,
  config: { method: 'POST', path: '/pay', body: { amount: 10 } },
  retry: { max_attempts: 1 },
  ...extra,
});

describe('on_error "branch"', () => {
  it('hands the failure to the error edges only; later nodes read nodes.pay.error; the run ends success with the node failed', async () => {
    const before = target.count('/pay');
    const id = await create({
      nodes: [
        pay({ on_error: 'branch' }),
        { id: 'ship', type: 'transform', config: { value: 'shipped' } },
        {
          id: 'notify',
          type: 'transform',
          config: {
            value: { code: '{{ nodes.pay.error.code }}', status: '{{ nodes.pay.error.data.status }}', reason: '{{ nodes.pay.error.data.body.error }}' },
          },
        },
      ],
      edges: [
        { from: 'pay', to: 'ship' },
        { from: 'pay', to: 'notify', branch: 'error' },
      ],
    });
    const result = await run(id);
    expect(result).toMatchObject({ status: 'success', output: { code: 'http_error', status: 402, reason: 'card declined' }, error: null });
    expect(target.count('/pay') - before).toBe(1);
    const execution = await view(result.execution_id);
    expect(execution).toMatchObject({ status: 'success', error: null });
    const failure = { code: 'http_error', message: 'HTTP 402 from POST /pay', data: { status: 402, body: { error: 'card declined', card: '4242' } } };
    expect(nodeOf(execution, 'pay')).toMatchObject({ status: 'failed', error: failure, output: { error: failure } });
    expect(nodeOf(execution, 'ship')).toMatchObject({ status: 'skipped' });
    expect(nodeOf(execution, 'notify')).toMatchObject({ status: 'success' });
  });

  it('a condition or switch takes its own branches on success and "error" on failure', async () => {
    const id = await create({
      nodes: [
        { id: 'big', type: 'condition', on_error: 'branch', config: { expression: '{{ $number(trigger.n) > 10 }}' } },
        { id: 'yes', type: 'transform', config: { value: 'big' } },
        { id: 'no', type: 'transform', config: { value: 'small' } },
        { id: 'oops', type: 'transform', config: { value: '{{ nodes.big.error.code }}' } },
      ],
      edges: [
        { from: 'big', to: 'yes', branch: 'true' },
        { from: 'big', to: 'no', branch: 'false' },
        { from: 'big', to: 'oops', branch: 'error' },
      ],
    });
    expect(await run(id, { n: '50' })).toMatchObject({ status: 'success', output: 'big' });
    expect(await run(id, { n: '5' })).toMatchObject({ status: 'success', output: 'small' });
    const failed = await run(id, { n: 'fifty' });
    expect(failed).toMatchObject({ status: 'success', output: 'expression_error' });
    const execution = await view(failed.execution_id);
    expect(nodeOf(execution, 'big')).toMatchObject({ status: 'failed', error: { code: 'expression_error' } });
    expect(['yes', 'no'].map((n) => nodeOf(execution, n).status)).toEqual(['skipped', 'skipped']);
  });

  it('a failing error branch fails the run with its own error', async () => {
    const id = await create({
      nodes: [
        pay({ on_error: 'branch' }),
        { id: 'give-up', type: 'fail', config: { message: 'Payment failed: {{ nodes.pay.error.data.body.error }}', code: 'payment_failed' } },
      ],
      edges: [{ from: 'pay', to: 'give-up', branch: 'error' }],
    });
    const result = await run(id);
    expect(result).toMatchObject({ status: 'failed', error: { code: 'payment_failed', message: 'Payment failed: card declined', node_id: 'give-up' } });
  });

  it('is refused at save where it cannot work, saying why', async () => {
    const noBranch = await app.admin.post(W, {
      title: 'bad',
      trigger: { type: 'manual' },
      nodes: [pay(), { id: 'notify', type: 'transform', config: { value: 1 } }],
      edges: [{ from: 'pay', to: 'notify', branch: 'error' }],
    });
    expect(noBranch.status).toBe(400);
    expect(noBranch.body.data.errors).toEqual([
      { field: 'edges.0.branch', message: '"error" edges leave only nodes with on_error "branch" (they carry its failure); pay has on_error "fail"' },
    ]);
    const nowhere = await app.admin.post(W, { title: 'bad', trigger: { type: 'manual' }, nodes: [pay({ on_error: 'branch' })] });
    expect(nowhere.status).toBe(400);
    expect(nowhere.body.data.errors[0].field).toBe('nodes.0.on_error');
  });
});

describe("an http_error's status and body", () => {
  it('are in the run’s error and the timeline when the node fails the run', async () => {
    const result = await run(await create({ nodes: [pay()] }));
    const data = { status: 402, body: { error: 'card declined', card: '4242' } };
    expect(result).toMatchObject({ status: 'failed', output: null, error: { code: 'http_error', node_id: 'pay', data } });
    const execution = await view(result.execution_id);
    expect(execution.error).toMatchObject({ code: 'http_error', node_id: 'pay', data });
    expect(nodeOf(execution, 'pay').error).toMatchObject({ code: 'http_error', data });
  });

  it('are in the output of a node that continues', async () => {
    const id = await create({
      nodes: [pay({ on_error: 'continue' }), { id: 'after', type: 'transform', config: { value: '{{ nodes.pay.error.data.status }}' } }],
      edges: [{ from: 'pay', to: 'after' }],
    });
    const result = await run(id);
    expect(result).toMatchObject({ status: 'partial', output: 402 });
    expect(nodeOf(await view(result.execution_id), 'pay').output).toMatchObject({ error: { code: 'http_error', data: { status: 402 } } });
  });

  it('are cut to the output limit, saying so', async () => {
    const result = await run(await create({ nodes: [pay({ config: { method: 'GET', path: '/huge' } })] }));
    const data = result.error.data as { status: number; body: string; truncated: boolean; size: number };
    expect(data).toMatchObject({ status: 400, truncated: true });
    expect(data.size).toBeGreaterThan(40_000);
    expect(data.body).toMatch(/^x+$/);
    expect(JSON.stringify(data).length).toBeLessThanOrEqual(16 * 1024);
  });
});

describe('error workflows', () => {
  let handlerOwner: TestUser;
  let handler: number;

  beforeAll(async () => {
    handlerOwner = await app.createUser('editor', 'handler-owner');
    handler = await create({ nodes: [{ id: 'echo', type: 'transform', config: { value: '{{ trigger }}' } }] }, handlerOwner.client);
    // Shared with the administrator, whose workflows name it.
    expect((await handlerOwner.client.patch(`${W}/${handler}`, { shared_with: [1] })).status).toBe(200);
  });

  it('starts when a run fails, with the failure as its payload, linked both ways, acting for its own people', async () => {
    const failing = await create({
      error_workflow_id: handler,
      nodes: [
        { id: 'first', type: 'transform', config: { value: 1 } },
        { id: 'boom', type: 'fail', config: { message: 'The card was declined', code: 'card_declined' } },
      ],
      edges: [{ from: 'first', to: 'boom' }],
    });
    expect((await app.admin.get(`${W}/${failing}`)).body.data.error_workflow_id).toBe(handler);
    const result = await run(failing);
    expect(result.status).toBe('failed');
    const failed = await eventually(async () => {
      const v = await view(result.execution_id);
      return v.error_workflow_execution_id ? v : undefined;
    });
    const handled = await settled(failed.error_workflow_execution_id);
    expect(handled).toMatchObject({ status: 'success', trigger: 'error', workflow_id: handler, triggered_by_execution_id: result.execution_id });
    const slug = (await app.admin.get(`${W}/${failing}`)).body.data.slug;
    expect(handled.output).toEqual({
      execution_id: result.execution_id,
      workflow_id: failing,
      workflow_slug: slug,
      status: 'failed',
      failed_node_id: 'boom',
      error: { code: 'card_declined', message: 'The card was declined', node_id: 'boom' },
      started_at: failed.started_at,
      ended_at: failed.finished_at,
    });
    // Its rights are those of its own workflow's people, not the failed run's.
    const [acting] = await app.sql<{ acting_user_ids: number[] }>('select acting_user_ids from executions where id = $1', [handled.id]);
    expect(acting!.acting_user_ids).toEqual([handlerOwner.id]);
    // A run that succeeds starts nothing.
    const ok = await create({ error_workflow_id: handler, nodes: [{ id: 'fine', type: 'transform', config: { value: 1 } }] });
    const fine = await run(ok);
    expect((await view(fine.execution_id)).error_workflow_execution_id).toBeNull();
  });

  it('never starts for a run of an error workflow: A -> B -> A stops at B', async () => {
    const b = await create({ nodes: [{ id: 'b-fails', type: 'fail', config: { message: 'b fails too' } }] });
    const a = await create({ error_workflow_id: b, nodes: [{ id: 'a-fails', type: 'fail', config: { message: 'a fails' } }] });
    expect((await app.admin.patch(`${W}/${b}`, { error_workflow_id: a })).status).toBe(200);
    const result = await run(a);
    const failed = await eventually(async () => (await view(result.execution_id)).error_workflow_execution_id);
    const bRun = await settled(failed);
    expect(bRun).toMatchObject({ status: 'failed', trigger: 'error', error_workflow_execution_id: null });
    const runs = await app.sql<{ n: number }>('select count(*)::int as n from executions where workflow_id = any($1)', [[a, b]]);
    expect(runs[0]!.n).toBe(2);
  });

  it('must be visible to the owner and whoever saves: 400 at save otherwise', async () => {
    const other = await app.createUser('editor', 'error-wf-other');
    const hidden = await create({ nodes: [{ id: 'x', type: 'transform', config: { value: 1 } }] }); // the administrator's, not shared
    const res = await other.client.post(W, {
      title: 'mine',
      trigger: { type: 'manual' },
      error_workflow_id: hidden,
      nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }],
    });
    expect(res.status).toBe(400);
    expect(res.body.data.errors).toEqual([
      { field: 'error_workflow_id', message: `workflow ${hidden} does not exist or is not visible to the workflow's owner` },
    ]);
    expect(
      (
        await other.client.post(W, {
          title: 'mine',
          trigger: { type: 'manual' },
          error_workflow_id: 999999,
          nodes: [{ id: 'a', type: 'transform', config: {} }],
        })
      ).status,
    ).toBe(400);
    // Cleared with null.
    const mine = await create({ error_workflow_id: handler, nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }] });
    const cleared = await app.admin.patch(`${W}/${mine}`, { error_workflow_id: null });
    expect(cleared.body.data.error_workflow_id).toBeNull();
  });

  it('starts for a run terminated in Temporal too', async () => {
    const long = await create({ error_workflow_id: handler, nodes: [{ id: 'wait', type: 'delay', config: { duration_ms: 600_000 } }] });
    const started = await app.admin.post(`${W}/${long}/run`, { payload: {} });
    const executionId = started.body.data.execution_id as number;
    await eventually(async () => (await app.sql(`select 1 from execution_nodes where execution_id = $1 and node_id = 'wait'`, [executionId])).length > 0);
    await app.stack.services.temporal.client.workflow
      .getHandle(app.stack.services.temporal.executionWorkflowId(executionId))
      .terminate('stopped by an operator');
    const failed = await eventually(async () => {
      const v = await view(executionId);
      return v.status === 'failed' && v.error_workflow_execution_id ? v : undefined;
    });
    expect(failed.error).toMatchObject({ code: 'terminated' });
    const handled = await settled(failed.error_workflow_execution_id);
    expect(handled.output).toMatchObject({ execution_id: executionId, failed_node_id: null, error: { code: 'terminated' } });
  });

  it('is started by the sweep when the worker that recorded the failure never sent its start', async () => {
    const failing = await create({ error_workflow_id: handler, nodes: [{ id: 'boom', type: 'fail', config: { message: 'lost start' } }] });
    // As if the worker died between writing the failure (with its handler's record) and starting the handler.
    const launch = vi.spyOn(app.stack.services.errorWorkflows, 'launch').mockResolvedValueOnce(false);
    try {
      const result = await run(failing);
      const pending = await eventually(async () => (await view(result.execution_id)).error_workflow_execution_id);
      expect(launch).toHaveBeenCalledTimes(1);
      const [row] = await app.sql<{ status: string; temporal_run_id: string | null }>('select status, temporal_run_id from executions where id = $1', [
        pending,
      ]);
      expect(row).toEqual({ status: 'running', temporal_run_id: null });
      // The sweep sends the start once the record is older than the worker's own start would take.
      await app.sql(`update executions set started_at = started_at - interval '1 minute' where id = $1`, [pending]);
      await app.stack.services.executions.sweep(0);
      expect((await settled(pending)).output).toMatchObject({ execution_id: result.execution_id, error: { message: 'lost start' } });
    } finally {
      launch.mockRestore();
    }
  });
});
