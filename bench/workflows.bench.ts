/**
 * Workflow engine benchmarks (DESIGN.md section 9), each against a hand-written Temporal
 * baseline run side by side on the same servers:
 *  - per-node overhead of an N-node chain of no-op nodes vs N no-op activities;
 *  - pure nodes as local activities vs the same as regular activities;
 *  - webhook -> 1-node run -> response vs client.workflow.execute() of a bare workflow,
 *    latency and runs/s at concurrency 10 and 50.
 * Run: node --import tsx bench/workflows.bench.ts   (BENCH_SCALE=0.2 for a quick pass)
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { loadConfig } from '../src/config.js';
import { generateMasterKey } from '../src/platform/crypto.js';
import { createLogger } from '../src/platform/logger.js';
import { startStack, type Stack } from '../src/stack.js';
import { bundleWorkflows } from '../src/temporal/worker.js';
import { load, report, row, scratchDir, type BenchRow, runMain } from './lib.js';
import { benchServers } from './servers.js';

const scale = Number(process.env.BENCH_SCALE ?? 1);
const N = 20;
const SAMPLES = Math.max(3, Math.round(12 * scale));
const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');


async function main() {
  const env = await benchServers('workflows', logger);
  const key = generateMasterKey();
  const bundle = bundleWorkflows();
  const bundlePath = join(scratchDir('svc-bench-bundle-'), 'bundle.js');
  await (await import('node:fs/promises')).writeFile(bundlePath, (await bundle).code);
  const stack = (queue: string, local: boolean, api: boolean): Promise<Stack> =>
    startStack(
      loadConfig({
        DATABASE_URL: env.databaseUrl,
        TEMPORAL_ADDRESS: env.temporalAddress,
        TEMPORAL_TASK_QUEUE: queue,
        SVC_ENCRYPTION_KEY: key,
        SVC_ADMIN_PASSWORD: 'bench-admin-password',
        SVC_LOCAL_PURE_NODES: String(local),
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'warn',
      }),
      logger,
      { embedded: false, roles: { api, worker: true }, workflowBundle: bundlePath },
    );
  const localStack = await stack('bench-local', true, true);
  const regularStack = await stack('bench-regular', false, false);

  // The baseline worker: hand-written workflows and one no-op activity, on the same servers.
  const baselineBundle = await bundleWorkflowCode({
    workflowsPath: fileURLToPath(new URL('./baseline.workflows.ts', import.meta.url)),
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} },
  });
  const connection = await NativeConnection.connect({ address: env.temporalAddress });
  const baselineWorker = await Worker.create({ connection, taskQueue: 'bench-baseline', workflowBundle: baselineBundle, activities: { noop: async () => null } });
  const baselineRun = baselineWorker.run();
  const client = localStack.services.temporal.client;
  // The baseline is plain Temporal: no payload codec, no execution mirror.
  const bare = new Client({ connection: await Connection.connect({ address: env.temporalAddress }) });

  const admin = localStack.services.auth.principal({ id: 1, login: 'admin', role: 'administrator' }, 'app_password');
  const chain = await localStack.services.workflows.create(admin, {
    title: 'Bench chain',
    description: '',
    tags: [],
    status: 'inactive',
    shared_with: [],
    trigger: { type: 'manual', config: {} },
    nodes: Array.from({ length: N }, (_, i) => ({ id: `n${i}`, type: 'transform', config: { value: i } })),
    edges: Array.from({ length: N - 1 }, (_, i) => ({ from: `n${i}`, to: `n${i + 1}` })),
  });
  const hook = await localStack.services.workflows.create(admin, {
    title: 'Bench hook',
    description: '',
    tags: [],
    status: 'active',
    shared_with: [],
    trigger: { type: 'webhook', config: { respond: 'last_node' } },
    nodes: [{ id: 'reply', type: 'transform', config: { value: '{{ trigger.i }}' } }],
    edges: [],
  });

  const runOurs = async (s: Stack) => {
    const started = await s.services.executions.start(chain, { payload: {}, trigger: 'manual' });
    await client.workflow.getHandle(started.temporalWorkflowId).result();
  };
  const timeEach = async (fn: () => Promise<unknown>) => {
    await fn(); // warm-up
    const times: number[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      const t = performance.now();
      await fn();
      times.push(performance.now() - t);
    }
    return times.reduce((a, b) => a + b, 0) / times.length;
  };
  const rows: BenchRow[] = [];

  const bareChainMs = await timeEach(() => bare.workflow.execute('bareChain', { taskQueue: 'bench-baseline', workflowId: randomUUID(), args: [N, false] }));
  const oursRegularMs = await timeEach(() => runOurs(regularStack));
  rows.push(row('per-node overhead', `ms per node, ${N}-node chain`, 'ms', bareChainMs / N, oursRegularMs / N, { max: 1.2 }));

  const oursLocalMs = await timeEach(() => runOurs(localStack));
  rows.push(row('pure nodes: local vs regular activities', `ms per node, ${N}-node chain`, 'ms', oursRegularMs / N, oursLocalMs / N, { max: 0.35 }));

  const hookUrl = `${localStack.urls.api}/api/workflow/v1/hooks/${hook.slug}`;
  const secret = hook.webhook_secret!;
  for (const concurrency of [10, 50]) {
    const total = Math.max(concurrency * 2, Math.round(concurrency * 6 * scale));
    const baseline = await load(concurrency, total, () => bare.workflow.execute('bareOne', { taskQueue: 'bench-baseline', workflowId: randomUUID() }));
    const ours = await load(concurrency, total, async (i) => {
      const res = await fetch(hookUrl, { method: 'POST', headers: { 'content-type': 'application/json', 'x-webhook-secret': secret }, body: JSON.stringify({ i }) });
      if (res.status !== 200) throw new Error(`webhook answered ${res.status}: ${await res.text()}`);
    });
    rows.push(row('webhook -> 1-node run -> response', `p50 latency, concurrency ${concurrency}`, 'ms', baseline.p50, ours.p50, { max: 1.3 }));
    rows.push(row('webhook -> 1-node run -> response', `runs/s, concurrency ${concurrency}`, 'runs/s', baseline.perSecond, ours.perSecond, { min: 0.7 }));
  }

  report(rows);
  baselineWorker.shutdown();
  await baselineRun;
  await connection.close();
  await bare.connection.close();
  await regularStack.stop();
  await localStack.stop();
  await env.stop();
}

runMain(main);
