import type { ChildProcess } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scratchDir } from '../bench/lib.js';
import { EmbeddedPostgres } from '../src/platform/embedded-postgres.js';
import { createLogger } from '../src/platform/logger.js';
import { TemporalDevServer, provisionTemporalCli } from '../src/platform/temporal-server.js';
import { ensureDatabase } from '../src/stack.js';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import type { HttpResponse } from './helpers/http.js';
import { eventually } from './helpers/http-target.js';
import { freePorts } from './helpers/ports.js';
import { killProcess, startWorkerProcess } from './helpers/worker-process.js';

/**
 * Waits and pending approvals survive what a deployment goes through: the worker SIGKILLed (and
 * an event sent while no worker runs), the Temporal server restarted on its database file, and
 * PostgreSQL restarted on its data directory. Afterwards the event and the decision resume their
 * runs, which finish on the branch they took, with a whole timeline. This file runs its own
 * PostgreSQL and its own file-backed Temporal dev server, since it restarts both.
 */

const logger = createLogger('error');
let dir: string;
let pgServer: EmbeddedPostgres;
let temporal: TemporalDevServer;
let app: TestApp;
let manager: TestUser;
let worker: ChildProcess | undefined;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';

beforeAll(async () => {
  // Readable by the user PostgreSQL runs as when the tests run as root.
  dir = scratchDir('svc-waits-durability-');
  const [pgPort, temporalPort] = await freePorts(2);
  pgServer = new EmbeddedPostgres({ dataDir: join(dir, 'pg'), port: pgPort!, logger });
  const databaseUrl = await ensureDatabase(await pgServer.start(), 'waits');
  temporal = new TemporalDevServer({
    cli: await provisionTemporalCli(logger, process.env.TEMPORAL_CLI),
    port: temporalPort!,
    uiPort: 0,
    headless: true,
    dbFile: join(dir, 'temporal.db'),
    logger,
  });
  const temporalAddress = await temporal.start();
  app = await startTestApp({ databaseUrl, env: { TEMPORAL_ADDRESS: temporalAddress } });
  manager = await app.createUser('editor', 'grace');
  worker = startWorkerProcess(app, { TEMPORAL_ADDRESS: temporalAddress });
});
afterAll(async () => {
  if (worker) await killProcess(worker);
  await app?.close();
  await temporal?.stop();
  await pgServer?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Sends a request until it is answered other than 503 (a dependency restarting), as a client would. */
async function patiently(request: () => Promise<HttpResponse>): Promise<HttpResponse> {
  return eventually(
    async () => {
      const res = await request().catch(() => undefined);
      return res && res.status !== 503 ? res : undefined;
    },
    120_000,
    'an answer other than 503',
  );
}

async function finished(executionId: number) {
  return eventually(
    async () => {
      const res = await app.admin.get(`${E}/${executionId}`).catch(() => undefined);
      return res?.status === 200 && res.body.data.status !== 'running' ? res.body.data : undefined;
    },
    180_000,
    `execution ${executionId} to finish`,
  );
}

const nodeOf = (view: { timeline: { node_id: string }[] }, id: string) => view.timeline.find((t) => t.node_id === id) as Record<string, any>;

async function workflow(node: Record<string, unknown>, branch: string) {
  const res = await app.admin.post(W, {
    title: `durable ${node.type}`,
    trigger: { type: 'manual' },
    nodes: [node, { id: 'then', type: 'transform', config: { value: `{{ nodes.${node.id}.branch }}` } }],
    edges: [{ from: node.id, to: 'then', branch }],
  });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

const start = async (workflowId: number, payload: unknown) => (await app.admin.post(`${W}/${workflowId}/run`, { payload })).body.data.execution_id as number;

describe('waits and approvals across restarts', { shuffle: false }, () => {
  it('survive a worker kill, a Temporal restart and a PostgreSQL restart, and finish on the branch they took', async () => {
    const waitFlow = await workflow(
      { id: 'pay', type: 'wait_for_event', config: { event: 'payment.received', key: '{{ trigger.order }}', timeout_ms: 600_000 } },
      'received',
    );
    const approvalFlow = await workflow(
      { id: 'ok', type: 'approval', config: { summary: 'Approve {{ trigger.order }}', approvers: { users: ['grace'] }, timeout_ms: 600_000 } },
      'approved',
    );
    const waiting = await start(waitFlow, { order: 'o-1' });
    const whileDown = await start(waitFlow, { order: 'o-2' });
    const approving = await start(approvalFlow, { order: 'o-3' });
    await eventually(async () => (await app.sql(`select 1 from workflow_event_waits where status = 'waiting'`)).length === 2, 60_000, 'both waits');
    const [action] = await eventually(
      async () => {
        const rows = await app.sql<{ action_id: string }>(`select action_id from agent_actions where execution_id = $1 and status = 'pending'`, [approving]);
        return rows.length ? rows : undefined;
      },
      60_000,
      'the pending approval',
    );

    // The worker dies; an event sent meanwhile is kept by Temporal for its run.
    await killProcess(worker!);
    const sentWhileDown = await patiently(() => app.admin.post('/api/workflow/v1/events', { name: 'payment.received', key: 'o-2', data: { amount: 2 } }));
    expect(sentWhileDown.body.data.delivered).toEqual([whileDown]);
    worker = startWorkerProcess(app, { TEMPORAL_ADDRESS: temporal.address });
    expect(nodeOf(await finished(whileDown), 'pay').output).toMatchObject({ branch: 'received', event: { data: { amount: 2 } } });

    // Temporal restarts on its database file, then PostgreSQL on its data directory.
    await temporal.stop();
    await temporal.start();
    await pgServer.stop();
    await pgServer.start();

    const sent = await patiently(() => app.admin.post('/api/workflow/v1/events', { name: 'payment.received', key: 'o-1', data: { amount: 1 } }));
    expect(sent.body.data.delivered).toEqual([waiting]);
    const decided = await patiently(() => manager.client.post(`/api/agent/v1/actions/${action!.action_id}/approve`, { note: 'after the restarts' }));
    expect(decided.status, decided.text).toBe(202);

    const paid = await finished(waiting);
    expect(paid.status).toBe('success');
    expect(paid.timeline.map((t: { node_id: string; status: string }) => [t.node_id, t.status])).toEqual([
      ['pay', 'success'],
      ['then', 'success'],
    ]);
    expect(nodeOf(paid, 'then').output).toBe('received');
    const approved = await finished(approving);
    expect(approved.status).toBe('success');
    expect(nodeOf(approved, 'ok').output).toMatchObject({ decision: 'approved', decided_by: [{ login: 'grace', note: 'after the restarts' }] });
    expect(nodeOf(approved, 'then').output).toBe('approved');
  }, 420_000);
});
