/**
 * Loops over items (`npm run bench -- for-each`): a for_each node over 10,000 items at
 * concurrency 50, with a `transform` body and with an `http_request` body, beside the bare SDK
 * doing the same fan-out (bench/baseline.workflows.ts `bareForEach`: child workflows over pages of
 * 500 items, each running its items 50 at a time, a local activity per item for the transform and
 * a GET activity per item for the call), in one run, on the same servers.
 *
 * Ours runs as `npm start` runs it (API and worker in one process, bench/harness.ts), driven over
 * HTTP: a run is started and its execution read until it ends. The bare SDK's worker and client
 * are one process of their own (bench/bare.ts). Rounds are interleaved (bare, ours, bare, ours)
 * so both meet the same machine. Per workload: items/s (start to all done), CPU ms per item of the
 * process (ours: API + worker; bare: worker + client), of the Temporal server and of PostgreSQL,
 * and Temporal history events per item. Goals: items/s >= 0.7x the bare SDK's, process CPU per
 * item <= 1.5x.
 *
 * Run: node --import tsx bench/for-each.bench.ts   (BENCH_ITEMS=10000, BENCH_ROUNDS=1)
 */
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { createLogger } from '../src/platform/logger.js';
import { type BareProcess, benchSetup, cpuMs, historiesBetween, oursApi, oursEnv, type OursProcess, startBare, startOurs } from './harness.js';
import { cleanups, median, report, round, row, runMain, type BenchRow } from './lib.js';

const ITEMS = Number(process.env.BENCH_ITEMS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
const CONCURRENCY = 50;
const PAGE = 500;
const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(', ');

/** What one round of one side spent. */
interface Round {
  seconds: number;
  cpu: { app: number; temporal: number; postgres: number };
  events: number;
}

async function main() {
  const cleanup = cleanups();
  try {
    await bench(cleanup);
  } finally {
    await cleanup.run();
  }
}

async function bench(cleanup: ReturnType<typeof cleanups>) {
  const { env, target, dir, settings } = await benchSetup('for_each', logger, cleanup);
  // BENCH_PROFILE=<dir>: our process under --cpu-prof, its profile written there when it stops.
  const profile = process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_PROFILE] : [];
  const ours = await startOurs(await oursEnv({ ...settings, queue: 'bench-loops', localPureNodes: true }), join(dir, 'ours.log'), profile);
  cleanup.add(() => ours.stop());
  const bare = await startBare(env.temporalAddress, 'bench-loops-bare');
  cleanup.add(() => bare.stop());
  const connection = await Connection.connect({ address: env.temporalAddress });
  cleanup.add(() => connection.close());
  const temporal = new Client({ connection });
  logger.warn({ ours: ours.pid, bare: bare.pid, ...env.pids, logs: dir, load: load() }, 'bench processes');

  const { call } = oursApi(ours);
  const http = (await call('POST', '/api/workflow/v1/connections', {
    type: 'http_bearer',
    label: 'target',
    cred: 'bench-token',
    extra: { base_url: target.url },
  })) as {
    id: number;
  };
  const loopOf = async (title: string, body: Record<string, unknown>, items: number) =>
    (
      (await call('POST', '/api/workflow/v1/workflows', {
        title: `${title} ${items}`,
        trigger: { type: 'manual' },
        nodes: [{ id: 'each', type: 'for_each', config: { items: `{{ [0..${items - 1}] }}`, concurrency: CONCURRENCY, body } }],
      })) as { id: number }
    ).id;
  const transformBody = { nodes: [{ id: 'double', type: 'transform', config: { value: { twice: '{{ item * 2 }}', at: '{{ index }}' } } }] };
  const httpBody = { nodes: [{ id: 'call', type: 'http_request', connection_id: http.id, config: { method: 'GET', path: '/item/{{ item }}' } }] };

  const workloads = [
    { name: 'transform', body: transformBody },
    { name: 'http_request', body: httpBody },
  ].filter((w) => !process.env.BENCH_WORKLOADS || process.env.BENCH_WORKLOADS.split(',').includes(w.name));
  const rows: BenchRow[] = [];
  for (const w of workloads) {
    const warm = await loopOf(`Bench loop ${w.name} warm-up`, w.body, 200);
    const full = await loopOf(`Bench loop ${w.name}`, w.body, ITEMS);
    await runOurs(ours, call, warm);
    await runBare(bare, w.name === 'transform' ? 'transform' : 'http', 200, target.url);
    const b: Round[] = [];
    const o: Round[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      b.push(await measure(env.pids, bare.pid, temporal, () => runBare(bare, w.name === 'transform' ? 'transform' : 'http', ITEMS, target.url)));
      o.push(await measure(env.pids, ours.pid, temporal, () => runOurs(ours, call, full)));
      logger.warn({ workload: w.name, round: i + 1, bare: b.at(-1), ours: o.at(-1), load: load() }, 'round');
    }
    rows.push(...rowsOf(w.name, b, o));
  }
  report(rows);
}

/** A run of the for_each workflow through the API, started and read until it ends. */
async function runOurs(ours: OursProcess, call: ReturnType<typeof oursApi>['call'], workflowId: number): Promise<void> {
  const { execution_id: id } = (await call('POST', `/api/workflow/v1/workflows/${workflowId}/run`, { payload: {} })) as { execution_id: number };
  for (;;) {
    const view = (await call('GET', `/api/workflow/v1/executions/${id}`)) as { status: string; error: unknown };
    if (view.status === 'success') return;
    if (view.status !== 'running') throw new Error(`loop ended ${view.status}: ${JSON.stringify(view.error)} (log: ${ours.logFile})`);
    await sleep(250);
  }
}

/** The bare fan-out of `items` items, one workflow started and awaited. */
async function runBare(bare: BareProcess, kind: 'transform' | 'http', items: number, url: string): Promise<void> {
  await bare.run({ type: 'bareForEach', args: [items, PAGE, CONCURRENCY, kind, url], total: 1, concurrency: 1 });
}

/** Runs `work` between two readings of the processes' CPU; the histories Temporal recorded meanwhile. */
async function measure(pids: { temporal?: number; postgres?: number }, appPid: number, temporal: Client, work: () => Promise<void>): Promise<Round> {
  const cpu = () => ({
    app: cpuMs(appPid),
    temporal: pids.temporal ? cpuMs(pids.temporal) : NaN,
    postgres: pids.postgres ? cpuMs(pids.postgres) : NaN,
  });
  const from = new Date();
  const before = cpu();
  const t = performance.now();
  await work();
  const seconds = (performance.now() - t) / 1000;
  const after = cpu();
  const to = new Date();
  const history = await historiesBetween(temporal, from, to);
  return {
    seconds,
    cpu: { app: after.app - before.app, temporal: after.temporal - before.temporal, postgres: after.postgres - before.postgres },
    events: history.events,
  };
}

function rowsOf(name: string, b: Round[], o: Round[]): BenchRow[] {
  const bench = `for_each, ${ITEMS} items, ${name} body, concurrency ${CONCURRENCY}`;
  const perItem = (rounds: Round[], pick: (r: Round) => number) => median(rounds.map((r) => pick(r) / ITEMS));
  const rate = (rounds: Round[]) => median(rounds.map((r) => ITEMS / r.seconds));
  const figures = (rounds: Round[], pick: (r: Round) => number) => rounds.map((r) => round(pick(r))).join(', ');
  return [
    row(
      bench,
      `items/s, start to all done (rounds: bare ${figures(b, (r) => ITEMS / r.seconds)}, ours ${figures(o, (r) => ITEMS / r.seconds)})`,
      'items/s',
      rate(b),
      rate(o),
      {
        min: 0.7,
      },
    ),
    row(
      bench,
      'CPU ms per item: our process (API + worker) vs the bare SDK’s (worker + client)',
      'ms',
      perItem(b, (r) => r.cpu.app),
      perItem(o, (r) => r.cpu.app),
      { max: 1.5 },
    ),
    row(
      bench,
      'CPU ms per item: the Temporal server',
      'ms',
      perItem(b, (r) => r.cpu.temporal),
      perItem(o, (r) => r.cpu.temporal),
      {},
    ),
    {
      ...row(
        bench,
        'CPU ms per item: PostgreSQL',
        'ms',
        perItem(b, (r) => r.cpu.postgres),
        perItem(o, (r) => r.cpu.postgres),
        {},
      ),
      detail: true,
    },
    {
      ...row(
        bench,
        'CPU ms per item: all three',
        'ms',
        perItem(b, (r) => r.cpu.app + r.cpu.temporal + r.cpu.postgres),
        perItem(o, (r) => r.cpu.app + r.cpu.temporal + r.cpu.postgres),
        {},
      ),
      detail: true,
    },
    {
      ...row(
        bench,
        'Temporal history events per item',
        'events',
        perItem(b, (r) => r.events),
        perItem(o, (r) => r.events),
        {},
      ),
      detail: true,
    },
  ];
}

runMain(main);
