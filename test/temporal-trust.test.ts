import type { ServerResponse } from 'node:http';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentSessionWorkflowId } from '../workflows/defs.js';
import { ADMIN_APP_PASSWORD, startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { closedHistory } from './helpers/history.js';
import { eventually, fixedServers } from './helpers/http-target.js';
import { providerConnection, startFakeOpenAi, type FakeProvider } from './helpers/fake-providers.js';
import { temporalCli } from './helpers/temporal-cli.js';

/**
 * Temporal is no way around the API. Whoever reaches its frontend can start runs, send updates
 * and complete activities with the Temporal CLI, but what they send is not encrypted with the
 * service key, so the worker takes none of it as input: a forged run ends at once with
 * `untrusted_input` and leaves no execution record, a forged approval approves nothing, and a
 * forged activity result is no node's output. The codec endpoints decode only for operators and
 * encrypt nothing for anyone, and failure messages are encrypted in the history like payloads.
 */
let app: TestApp;
let openai: FakeProvider;
let editor: TestUser;
let workflowId: number;
const servers = fixedServers();
const W = '/api/workflow/v1';
const M = '/api/management/v1';
const SECRET = 'the admin-only secret';

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  openai = await startFakeOpenAi();
  editor = await app.createUser('editor');
  const vault = await app.admin.post(`${M}/entities`, {
    slug: 'vault',
    name: 'Vault',
    schema: { fields: { secret: { type: 'string' } } },
    capabilities: { view: 'svc_manage_entities', create: 'svc_manage_entities', edit: 'svc_manage_entities', delete: 'svc_manage_entities' },
  });
  expect(vault.status, vault.text).toBe(201);
  expect((await app.admin.post(`${M}/records/vault`, { secret: SECRET })).status).toBe(201);
  expect((await app.admin.post(`${M}/entities`, { slug: 'note', name: 'Note', schema: { fields: { title: { type: 'string' } } } })).status).toBe(201);
  const created = await app.admin.post(`${W}/workflows`, {
    title: 'reads the vault',
    trigger: { type: 'manual' },
    nodes: [{ id: 'read', type: 'record_query', config: { entity: 'vault' } }],
    edges: [],
  });
  expect(created.status, created.text).toBe(201);
  workflowId = created.body.data.id;
});
afterAll(async () => {
  await app?.close();
  await openai?.close();
  await servers.closeAll();
});

const temporal = () => app.stack.services.temporal;
const cli = (args: string[]) => temporalCli(args, temporal().namespace);
let forged = 0;

/** Starts a run of `type` on the service's task queue with the Temporal CLI; its workflow id. */
async function forgeStart(type: string, input: unknown, extra: string[] = []): Promise<string> {
  const id = `forged-${type}-${++forged}-${Date.now()}`;
  const inputArgs = input === undefined ? [] : ['--input', typeof input === 'string' ? input : JSON.stringify(input)];
  await cli(['workflow', 'start', '--task-queue', app.config.TEMPORAL_TASK_QUEUE, '--type', type, '--workflow-id', id, ...inputArgs, ...extra]);
  return id;
}

/** How a forged run ended: the failure it failed with (it must close by itself, and soon). */
async function failureOf(workflowId: string): Promise<ApplicationFailure> {
  const handle = temporal().client.workflow.getHandle(workflowId);
  await eventually(async () => (await handle.describe()).status.name !== 'RUNNING', 30_000, `${workflowId} to close`);
  const err = await handle.result().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, `${workflowId} completed`).toBeInstanceOf(WorkflowFailedError);
  const cause = (err as WorkflowFailedError).cause;
  expect(cause).toBeInstanceOf(ApplicationFailure);
  return cause as ApplicationFailure;
}

const executionsOf = async (id: number) => (await app.sql<{ id: string }>('select id from executions where workflow_id = $1', [id])).length;

describe('a run started on Temporal directly', () => {
  it("does not act as the workflow's owner: plaintext input fails the run at once with untrusted_input, and no execution record is made", async () => {
    const id = await forgeStart('runGraph', { workflowId, payload: {}, trigger: 'schedule' });
    const failure = await failureOf(id);
    expect(failure.type).toBe('untrusted_input');
    expect(failure.nonRetryable).toBe(true);
    // An error made in workflow code keeps its stack: each frame's function and its position in the workflow bundle.
    expect(failure.stack).toMatch(/\n {4}at untrustedInput \(\S*workflow-bundle-[0-9a-f]+\.js:\d+:\d+\)/);
    expect(await executionsOf(workflowId)).toBe(0);
    // The history holds no result, so nothing of the vault either.
    const history = await temporal().client.workflow.getHandle(id).fetchHistory();
    expect(JSON.stringify(history)).not.toContain(SECRET);
  });

  it('is refused for every workflow type, and with no input or ciphertext that is not the service’s', async () => {
    const session = await app.admin.post('/api/agent/v1/sessions', { provider_id: await providerConnection(app.admin, 'openai', openai.url), model_id: 'm' });
    expect(session.status, session.text).toBe(201);
    const starts = [
      await forgeStart('agentSession', { sessionId: session.body.data.session_id, maxModelCalls: 5, updatesPerRun: 50 }),
      await forgeStart('deliverLicenseWebhook', { deliveryId: '00000000-0000-0000-0000-000000000000', maxAttempts: 1, retryMs: 1000, timeoutMs: 1000 }),
      await forgeStart('runGraph', undefined),
      // Bytes that claim to be the codec's but were not sealed with the service key.
      await forgeStart('runGraph', Buffer.from('not the service key').toString('base64'), [
        '--input-meta',
        'encoding=binary/encrypted',
        '--input-meta',
        'encryption-key-id=k1',
        '--input-base64',
      ]),
    ];
    for (const id of starts) expect((await failureOf(id)).type, id).toBe('untrusted_input');
    expect(await executionsOf(workflowId)).toBe(0);
  });

  it("is refused with the service's own ciphertext too when it was sealed for an activity: a node's payload copied out of a history is no run's input", async () => {
    const run = await app.admin.post(`${W}/workflows/${workflowId}/run?wait=true&timeout_ms=90000`, { payload: {} });
    expect(run.status, run.text).toBe(200);
    const history = await closedHistory(temporal().client.workflow.getHandle(temporal().executionWorkflowId(run.body.data.execution_id)));
    const scheduled = history.events!.find((e) => e.activityTaskScheduledEventAttributes?.activityId === 'node:read')!;
    const copied = scheduled.activityTaskScheduledEventAttributes!.input!.payloads![0]!;
    const meta = Object.entries(copied.metadata!).flatMap(([k, v]) => ['--input-meta', `${k}=${Buffer.from(v).toString()}`]);
    expect(meta).toContain('encryption-scope=activity');
    const id = await forgeStart('runGraph', Buffer.from(copied.data!).toString('base64'), [...meta, '--input-base64']);
    expect((await failureOf(id)).type).toBe('untrusted_input');
  });

  it('runs started through the API still run, and their Temporal input stays ciphertext', async () => {
    const run = await app.admin.post(`${W}/workflows/${workflowId}/run?wait=true&timeout_ms=90000`, { payload: { note: 'by the API' } });
    expect(run.status, run.text).toBe(200);
    expect(run.body.data.status).toBe('success');
    const history = await closedHistory(temporal().client.workflow.getHandle(temporal().executionWorkflowId(run.body.data.execution_id)));
    expect(JSON.stringify(history)).not.toContain('by the API');
  });
});

describe('an update sent with the Temporal CLI', () => {
  it('approves nothing: a plaintext agentDecision is refused before it is accepted and the action stays pending', async () => {
    const providerId = await providerConnection(app.admin, 'openai', openai.url);
    const created = await app.admin.post('/api/agent/v1/sessions', { provider_id: providerId, model_id: 'gpt-test' });
    expect(created.status, created.text).toBe(201);
    const sessionId = created.body.data.session_id as string;
    openai.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'forged approval' } } }] });
    const asked = await app.admin.post(`/api/agent/v1/sessions/${sessionId}/messages`, { content: 'make a note', stream: false });
    expect(asked.body.data.outcome, asked.text).toBe('gate_pending');
    const actionId = asked.body.data.pending_action.action_id as string;

    const update = cli([
      'workflow',
      'update',
      'execute',
      '--workflow-id',
      agentSessionWorkflowId(sessionId),
      '--name',
      'agentDecision',
      '--input',
      JSON.stringify({ actionId, approved: true, decidedBy: 1 }),
      // The CLI reads the refusal through the API's codec endpoint, as an operator would.
      '--codec-endpoint',
      `${app.url}/api/temporal-codec`,
      '--codec-auth',
      `Basic ${Buffer.from(`admin:${ADMIN_APP_PASSWORD}`).toString('base64')}`,
    ]);
    await expect(update).rejects.toThrow(/not produced by this service/);
    expect((await app.admin.get(`/api/agent/v1/actions/${actionId}`)).body.data).toMatchObject({ status: 'pending', decided_by: null });
    expect(await app.sql(`select 1 from records.e_note where title = 'forged approval'`)).toEqual([]);

    // The session is unharmed: the owner's approval through the API runs the tool.
    openai.script({ text: 'Noted.' });
    const approved = await app.admin.post(`/api/agent/v1/actions/${actionId}/approve`);
    expect(approved.body.data.outcome, approved.text).toBe('answered');
    expect(await app.sql(`select 1 from records.e_note where title = 'forged approval'`)).toHaveLength(1);
  });
});

describe('an activity result sent with the Temporal CLI', () => {
  it("is no node's output: the run fails with untrusted_input instead of going on with it", async () => {
    let held!: (res: ServerResponse) => void;
    const asked = new Promise<ServerResponse>((resolve) => (held = resolve));
    const url = await servers.start((_req, res) => held(res));
    const conn = await app.admin.post(`${W}/connections`, { type: 'http_bearer', label: 'held', cred: 'tok-held', extra: { base_url: url } });
    const created = await app.admin.post(`${W}/workflows`, {
      title: 'waits on a call',
      trigger: { type: 'manual' },
      nodes: [
        { id: 'call', type: 'http_request', connection_id: conn.body.data.id, config: { method: 'GET', path: '/held' }, timeout_ms: 60_000 },
        { id: 'after', type: 'transform', config: { value: '{{ nodes.call }}' } },
      ],
      edges: [{ from: 'call', to: 'after' }],
    });
    expect(created.status, created.text).toBe(201);
    const started = await app.admin.post(`${W}/workflows/${created.body.data.id}/run`, { payload: {} });
    const executionId = started.body.data.execution_id as number;
    const res = await asked;
    await cli([
      'activity',
      'complete',
      '--workflow-id',
      temporal().executionWorkflowId(executionId),
      '--activity-id',
      'node:call',
      '--result',
      JSON.stringify({ output: { forged: true } }),
    ]);
    const done = await eventually(
      async () => {
        const view = (await app.admin.get(`${W}/executions/${executionId}`)).body.data;
        return view.status !== 'running' ? view : undefined;
      },
      60_000,
      'the run to end',
    );
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"real":true}');
    expect(done.status).toBe('failed');
    expect(done.error).toMatchObject({ code: 'untrusted_input', node_id: 'call' });
    expect(JSON.stringify(done)).not.toContain('forged');
  });
});

describe('the codec endpoint', () => {
  async function adminRunInput(): Promise<{ payloads: { metadata: Record<string, string>; data: string }[]; executionId: number }> {
    const run = await app.admin.post(`${W}/workflows/${workflowId}/run?wait=true&timeout_ms=90000`, { payload: { card: 'admin card 4000-0000' } });
    expect(run.status, run.text).toBe(200);
    const executionId = run.body.data.execution_id as number;
    const history = await temporal().client.workflow.getHandle(temporal().executionWorkflowId(executionId)).fetchHistory();
    const input = history.events![0]!.workflowExecutionStartedEventAttributes!.input!.payloads!;
    const b64 = (bytes: Uint8Array | null | undefined) => Buffer.from(bytes ?? []).toString('base64');
    return {
      executionId,
      payloads: input.map((p) => ({ metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, b64(v)])), data: b64(p.data) })),
    };
  }

  it("decodes for operators only: an editor cannot read the admin's run input through it", async () => {
    const { payloads, executionId } = await adminRunInput();
    expect((await editor.client.get(`${W}/executions/${executionId}`)).status).toBe(404);
    const refused = await editor.client.post('/api/temporal-codec/decode', { payloads });
    expect(refused.status, refused.text).toBe(403);
    expect(refused.body).toMatchObject({ error: 'forbidden', data: { capability: 'svc_decode_payloads' } });
    expect(refused.text).not.toContain('admin card');
    const decoded = await app.admin.post('/api/temporal-codec/decode', { payloads });
    expect(decoded.status, decoded.text).toBe(200);
    expect(Buffer.from(decoded.body.payloads[0].data, 'base64').toString()).toContain('admin card 4000-0000');
  });

  it('encrypts nothing: encode answers the payloads as they came, which the worker then refuses', async () => {
    const plain = {
      payloads: [{ metadata: { encoding: Buffer.from('json/plain').toString('base64') }, data: Buffer.from('{"workflowId":1}').toString('base64') }],
    };
    const encoded = await app.admin.post('/api/temporal-codec/encode', plain);
    expect(encoded.status, encoded.text).toBe(200);
    expect(encoded.body).toEqual(plain);
    expect((await editor.client.post('/api/temporal-codec/encode', plain)).status).toBe(403);
  });
});

describe('failure messages in the Temporal history', () => {
  it("are encrypted like payloads: a failing expression's message does not show the payload value in clear, and the API still tells it", async () => {
    const card = '4111111111111111';
    const created = await app.admin.post(`${W}/workflows`, {
      title: 'declines a card',
      trigger: { type: 'manual' },
      nodes: [{ id: 'check', type: 'transform', config: { value: '{{ $error("declined card " & trigger.card) }}' } }],
      edges: [],
    });
    expect(created.status, created.text).toBe(201);
    const run = await app.admin.post(`${W}/workflows/${created.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: { card } });
    expect(run.body.data.status, run.text).toBe('failed');
    const view = (await app.admin.get(`${W}/executions/${run.body.data.execution_id}`)).body.data;
    expect(view.error).toMatchObject({ code: 'expression_error', node_id: 'check' });
    expect(view.error.message).toContain(`declined card ${card}`);

    const handle = temporal().client.workflow.getHandle(temporal().executionWorkflowId(run.body.data.execution_id));
    const history = await handle.fetchHistory();
    const raw = JSON.stringify(history);
    expect(raw).toContain('Encoded failure');
    expect(raw).not.toContain(card);
  });
});
