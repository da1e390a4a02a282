/**
 * Workflow engine benchmarks, each beside the bare Temporal SDK doing the
 * same on the same server, configured the same way (the embedded default's file-backed dev server
 * and dynamic config, the service's worker options, eager starts), and against absolute goals:
 *  - limit: the bare SDK's local-activity step, the least a sequential step can cost here;
 *  - a sequential regular-activity node: http_request nodes against a local target vs activities
 *    doing the same GET;
 *  - per-node overhead of a chain of no-op nodes, and pure nodes as local activities;
 *  - one-node runs through POST /workflows/{id}/run at concurrency 50, start to all finished;
 *  - webhook -> 1-node run -> response at concurrency 1, 10 and 50;
 *  - how late a 1 s and a 5 s delay node finish.
 * Each figure is the median of BENCH_ROUNDS rounds (default 3).
 * Run: node --import tsx bench/workflows.bench.ts   (BENCH_SCALE=0.3 for a quick pass)
 */
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@temporalio/client';
import { NativeConnection, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { loadConfig } from '../src/config.js';
import { generateMasterKey } from '../src/platform/crypto.js';
import { createLogger } from '../src/platform/logger.js';
import { startStack, type Stack } from '../src/stack.js';
import { WORKER_TUNING, bundleWorkflows } from '../src/temporal/worker.js';
import { basicAuth, load, median, report, round, row, scratchDir, type BenchRow, runMain } from './lib.js';
import { benchServers } from './servers.js';

const scale = Number(process.env.BENCH_SCALE ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CHAIN = 20;
const HTTP_CHAIN = 10;
const RUNS_PER_ROUND = Math.max(2, Math.round(6 * scale));
const THROUGHPUT_RUNS = Math.max(50, Math.round(200 * scale));
const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');
const APP_PASSWORD = 'bench-app-password-0123456789';

/** Median over rounds of `measure` (each round one figure). */
async function rounds(measure: () => Promise<number>): Promise<number> {
  await measure(); // warm-up
  const figures: number[] = [];
  for (let i = 0; i < ROUNDS; i++) figures.push(await measure());
  return median(figures);
}

/** Mean of `n` sequential calls, in ms. */
async function meanOf(n: number, fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  for (let i = 0; i < n; i++) await fn();
  return (performance.now() - t) / n;
}

async function main() {
  const env = await benchServers('workflows', logger);
  const target = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
  await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
  const targetUrl = `http://127.0.0.1:${(target.address() as { port: number }).port}`;

  const key = generateMasterKey();
  const bundlePath = join(scratchDir('svc-bench-bundle-'), 'bundle.js');
  await writeFile(bundlePath, (await bundleWorkflows()).code);
  // As `npm start` runs it: API and worker in one process.
  const stack = (queue: string, local: boolean): Promise<Stack> =>
    startStack(
      loadConfig({
        DATABASE_URL: env.databaseUrl,
        TEMPORAL_ADDRESS: env.temporalAddress,
        TEMPORAL_TASK_QUEUE: queue,
        SVC_INSTANCE_ID: queue,
        SVC_ENCRYPTION_KEY: key,
        SVC_ADMIN_PASSWORD: 'bench-admin-password',
        SVC_ADMIN_APP_PASSWORD: APP_PASSWORD,
        SVC_LOCAL_PURE_NODES: String(local),
        // The benchmark's own target, named as an operator names a service on an internal address.
        SVC_EGRESS_ALLOW: targetUrl.replace('http://', ''),
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'warn',
      }),
      logger,
      { embedded: false, roles: { api: true, worker: true }, workflowBundle: bundlePath },
    );
  const ours = await stack('bench-local', true);
  const regular = await stack('bench-regular', false);
  const api = ours.urls.api!;
  const headers = { authorization: basicAuth('admin', APP_PASSWORD), 'content-type': 'application/json' };

  // The baseline: hand-written workflows on a worker with the same options, started eagerly by a
  // client on the worker's connection, no payload codec, no execution mirror.
  const baselineBundle = await bundleWorkflowCode({
    workflowsPath: fileURLToPath(new URL('./baseline.workflows.ts', import.meta.url)),
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} },
  });
  const connection = await NativeConnection.connect({ address: env.temporalAddress });
  const baselineWorker = await Worker.create({
    connection,
    taskQueue: 'bench-baseline',
    workflowBundle: baselineBundle,
    activities: { noop: async () => null, get: async (url: string) => (await fetch(url)).status },
    ...WORKER_TUNING,
  });
  const baselineRun = baselineWorker.run();
  const bare = new Client({ connection });
  const bareRun = (type: string, args: unknown[] = []) =>
    bare.workflow.execute(type, { taskQueue: 'bench-baseline', workflowId: randomUUID(), args, requestEagerStart: true });

  const admin = ours.services.auth.principal({ id: 1, login: 'admin', role: 'administrator' }, 'app_password');
  const define = (s: Stack, def: Record<string, unknown>) =>
    s.services.workflows.create(admin, {
      description: '',
      tags: [],
      status: 'inactive',
      shared_with: [],
      trigger: { type: 'manual', config: {} },
      edges: [],
      ...def,
    } as never);
  const chainOf = (n: number, node: (i: number) => Record<string, unknown>) => ({
    nodes: Array.from({ length: n }, (_, i) => ({ id: `n${i}`, ...node(i) })),
    edges: Array.from({ length: n - 1 }, (_, i) => ({ from: `n${i}`, to: `n${i + 1}` })),
  });
  const connectionId = (
    await ours.services.connections.create({ type: 'http_bearer', label: 'target', cred: 'bench-token', extra: { base_url: targetUrl } }, admin.id)
  ).id;
  const httpChain = await define(ours, {
    title: 'Bench http chain',
    ...chainOf(HTTP_CHAIN, () => ({ type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/' } })),
  });
  const pureChain = async (s: Stack) =>
    define(s, { title: `Bench chain ${s.services.config.TEMPORAL_TASK_QUEUE}`, ...chainOf(CHAIN, (i) => ({ type: 'transform', config: { value: i } })) });
  const [localChain, regularChain] = [await pureChain(ours), await pureChain(regular)];
  const one = await define(ours, { title: 'Bench one', nodes: [{ id: 'only', type: 'transform', config: { value: '{{ trigger.i }}' } }] });
  const hook = await define(ours, {
    title: 'Bench hook',
    status: 'active',
    trigger: { type: 'webhook', config: { respond: 'last_node' } },
    nodes: [{ id: 'reply', type: 'transform', config: { value: '{{ trigger.i }}' } }],
  });
  const delays = Object.fromEntries(
    await Promise.all(
      [1000, 5000].map(async (ms) => [
        ms,
        await define(ours, { title: `Bench delay ${ms}`, nodes: [{ id: 'wait', type: 'delay', config: { duration_ms: ms } }] }),
      ]),
    ),
  );

  const runThrough = async (s: Stack, workflow: { id: number } & Record<string, unknown>) => {
    const started = await s.services.executions.start(workflow as never, { payload: {}, trigger: 'manual' });
    await s.services.temporal.client.workflow.getHandle(started.temporalWorkflowId).result();
  };
  const rows: BenchRow[] = [];

  // The limit: nothing of ours, the cheapest sequential step the server offers.
  const limit = await rounds(async () => (await meanOf(RUNS_PER_ROUND, () => bareRun('bareChain', [CHAIN, true]))) / CHAIN);
  rows.push({ ...row('limit: what the server can do', 'bare SDK local-activity step, 20-step chain', 'ms', limit, limit, {}), limit: true });
  const perStep = (r: BenchRow) => ({ ...r, perLimit: round(r.ours / limit) });

  const bareHttp = await rounds(async () => (await meanOf(RUNS_PER_ROUND, () => bareRun('bareHttpChain', [HTTP_CHAIN, targetUrl]))) / HTTP_CHAIN);
  const oursHttp = await rounds(async () => (await meanOf(RUNS_PER_ROUND, () => runThrough(ours, httpChain as never))) / HTTP_CHAIN);
  rows.push(
    perStep(
      row(
        'sequential regular-activity node',
        `http_request node to a local target, ms per node, ${HTTP_CHAIN}-node chain`,
        'ms',
        bareHttp,
        oursHttp,
        { max: 1.2 },
        { max: 15 },
      ),
    ),
  );

  const bareChain = await rounds(async () => (await meanOf(RUNS_PER_ROUND, () => bareRun('bareChain', [CHAIN, false]))) / CHAIN);
  const oursRegular = await rounds(async () => (await meanOf(RUNS_PER_ROUND, () => runThrough(regular, regularChain as never))) / CHAIN);
  rows.push(perStep(row('per-node overhead', `no-op nodes as activities, ms per node, ${CHAIN}-node chain`, 'ms', bareChain, oursRegular, { max: 1.2 })));
  const oursLocal = await rounds(async () => (await meanOf(RUNS_PER_ROUND, () => runThrough(ours, localChain as never))) / CHAIN);
  rows.push(perStep(row('pure nodes: local vs regular activities', `ms per node, ${CHAIN}-node chain`, 'ms', oursRegular, oursLocal, { max: 0.35 })));

  // Throughput: THROUGHPUT_RUNS one-node runs started at concurrency 50, start to all finished.
  const bareThroughput = await rounds(async () => {
    const t = performance.now();
    const handles: Promise<unknown>[] = [];
    await load(50, THROUGHPUT_RUNS, async () => {
      const handle = await bare.workflow.start('bareOne', { taskQueue: 'bench-baseline', workflowId: randomUUID(), requestEagerStart: true });
      handles.push(handle.result());
    });
    await Promise.all(handles);
    return THROUGHPUT_RUNS / ((performance.now() - t) / 1000);
  });
  const oursThroughput = await rounds(async () => {
    const t = performance.now();
    const results: Promise<unknown>[] = [];
    await load(50, THROUGHPUT_RUNS, async (i) => {
      const res = await fetch(`${api}/api/workflow/v1/workflows/${one.id}/run`, { method: 'POST', headers, body: JSON.stringify({ payload: { i } }) });
      if (res.status !== 202) throw new Error(`run answered ${res.status}: ${await res.text()}`);
      const { data } = (await res.json()) as { data: { execution_id: number } };
      results.push(ours.services.temporal.client.workflow.getHandle(ours.services.temporal.executionWorkflowId(data.execution_id)).result());
    });
    await Promise.all(results);
    return THROUGHPUT_RUNS / ((performance.now() - t) / 1000);
  });
  rows.push(
    row(
      'one-node runs through POST /workflows/{id}/run',
      `runs/s, concurrency 50, ${THROUGHPUT_RUNS} runs, start to all finished`,
      'runs/s',
      bareThroughput,
      oursThroughput,
      { min: 0.7 },
      { min: 100 },
    ),
  );

  const hookUrl = `${api}/api/workflow/v1/hooks/${hook.slug}`;
  const secret = hook.webhook_secret!;
  const callHook = async (i: number) => {
    const res = await fetch(hookUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-webhook-secret': secret },
      body: JSON.stringify({ i }),
    });
    if (res.status !== 200) throw new Error(`webhook answered ${res.status}: ${await res.text()}`);
  };
  for (const concurrency of [1, 10, 50]) {
    const total = Math.max(concurrency * 2, Math.round((concurrency === 1 ? 30 : concurrency * 6) * scale));
    const b = { p50: [] as number[], rps: [] as number[] };
    const o = { p50: [] as number[], rps: [] as number[] };
    await load(concurrency, concurrency, () => bareRun('bareOne')); // warm-up
    await load(concurrency, concurrency, callHook);
    for (let i = 0; i < ROUNDS; i++) {
      const baseline = await load(concurrency, total, () => bareRun('bareOne'));
      const ourRound = await load(concurrency, total, callHook);
      b.p50.push(baseline.p50);
      b.rps.push(baseline.perSecond);
      o.p50.push(ourRound.p50);
      o.rps.push(ourRound.perSecond);
    }
    rows.push(
      row(
        'webhook -> 1-node run -> response',
        `p50 latency, concurrency ${concurrency}`,
        'ms',
        median(b.p50),
        median(o.p50),
        concurrency === 1 ? {} : { max: 1.3 },
        concurrency === 1 ? { max: 50 } : undefined,
      ),
    );
    if (concurrency > 1)
      rows.push(row('webhook -> 1-node run -> response', `runs/s, concurrency ${concurrency}`, 'runs/s', median(b.rps), median(o.rps), { min: 0.7 }));
  }

  // Delay precision: how long a delay node's timeline entry says it waited beyond its duration,
  // beside how late the bare SDK's timer fired (TimerStarted -> TimerFired in its history).
  for (const ms of [1000, 5000]) {
    const lateBare: number[] = [];
    const lateOurs: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const workflowId = randomUUID();
      await bare.workflow.execute('bareSleep', { taskQueue: 'bench-baseline', workflowId, args: [ms], requestEagerStart: true });
      const events = (await bare.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
      const at = (e: (typeof events)[number] | undefined) => Number(e?.eventTime?.seconds ?? 0) * 1000 + (e?.eventTime?.nanos ?? 0) / 1e6;
      lateBare.push(at(events.find((e) => e.timerFiredEventAttributes)) - at(events.find((e) => e.timerStartedEventAttributes)) - ms);
      const started = await ours.services.executions.start(delays[ms] as never, { payload: {}, trigger: 'manual' });
      await ours.services.temporal.client.workflow.getHandle(started.temporalWorkflowId).result();
      const [node] = await ours.services.sql.query<{ duration_ms: number }>('select duration_ms from execution_nodes where execution_id = ?', [
        started.executionId,
      ]);
      lateOurs.push(node!.duration_ms - ms);
    }
    rows.push({
      ...row(
        'delay node precision',
        `${ms / 1000} s delay: waited beyond its duration (ours: the node's timeline entry; bare: the timer's events)`,
        'ms',
        median(lateBare),
        median(lateOurs),
        {},
      ),
      addedUnit: 'ms',
      ratio: round(median(lateOurs) - median(lateBare)),
    });
  }

  report(rows);
  baselineWorker.shutdown();
  await baselineRun;
  await connection.close();
  await regular.stop();
  await ours.stop();
  target.close();
  await env.stop();
}

runMain(main);
