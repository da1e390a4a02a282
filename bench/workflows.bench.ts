/**
 * Workflow engine benchmarks, each beside the bare Temporal SDK doing the
 * same on the same server, configured the same way (the embedded default's file-backed dev server
 * and dynamic config, the service's worker options, eager starts), and against absolute goals.
 *
 * Ours runs as `npm start` runs it, a process of its own (API and worker in one), driven over HTTP
 * (a second one with SVC_LOCAL_PURE_NODES=false runs pure nodes as regular activities); the bare
 * SDK's worker and the client that starts its workflows are one process of their own
 * (bench/bare.ts). So each one's CPU is read apart, and so are the Temporal server's and
 * PostgreSQL's while each one works: the two are measured one after the other, never at once.
 *
 * Time and cost, for three workloads (`BENCH_WORKLOADS=cost`, or `npm run bench -- cost`, runs
 * only these and the limit):
 *  - one-node runs at concurrency 50: an http_request node to a local target through
 *    POST /workflows/{id}/run?wait=true vs `client.workflow.execute()` of a workflow of one
 *    activity doing the same GET; runs/s, start to all finished;
 *  - per-node overhead of a 20-node chain of no-op nodes (as regular activities) vs 20 no-op
 *    activities;
 *  - a sequential 10-node http_request chain vs 10 activities doing the same GET;
 * and for each, per run (or per node of a chain): CPU ms of the process (ours; bare: worker and
 * client), of the Temporal server and of PostgreSQL; PostgreSQL transactions, rows, write
 * transactions and WAL; Temporal history events and bytes, and its persistence writes.
 *
 * Time only: the limit (the bare SDK's local-activity step, the least a sequential step can cost
 * here), pure nodes as local activities, webhook -> 1-node run -> response at concurrency 1, 10
 * and 50, and how late a 1 s and a 5 s delay node finish.
 *
 * Each time figure is the median of BENCH_ROUNDS rounds (default 3); each cost figure is the
 * total over those rounds divided by their runs (or nodes).
 * Run: node --import tsx bench/workflows.bench.ts   (BENCH_SCALE=0.3 for a quick pass)
 */
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import { createLogger } from '../src/platform/logger.js';
import {
  type BareProcess,
  benchSetup,
  benchWorkflows,
  CHAIN,
  cpuMs,
  findTemporalMetrics,
  historiesBetween,
  type HistoryTotals,
  HTTP_CHAIN,
  isWriteOperation,
  oursApi,
  oursEnv,
  type OursProcess,
  type PgCounters,
  PgStats,
  startBare,
  startOurs,
  temporalPersistence,
  writtenBytes,
} from './harness.js';
import { apiCaller, cleanups, load, median, report, round, row, type BenchRow, runMain } from './lib.js';

const scale = Number(process.env.BENCH_SCALE ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const COST_ONLY = process.env.BENCH_WORKLOADS === 'cost';
const CONCURRENCY = 50;
const RUNS_PER_ROUND = Math.max(2, Math.round(6 * scale));
const THROUGHPUT_RUNS = Math.max(50, Math.round(200 * scale));
const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');
/** The least and the most of a round's figures. */
const range = (figures: number[]) => `${round(Math.min(...figures))}–${round(Math.max(...figures))}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Mean of `n` sequential calls, in ms. */
async function meanOf(n: number, fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  for (let i = 0; i < n; i++) await fn();
  return (performance.now() - t) / n;
}

/** The counters of the machine's three parties at one moment. */
interface Reading {
  at: Date;
  cpu: { app: number; temporal: number; postgres: number };
  /** Temporal's persistence requests by operation. */
  persistence?: Map<string, number>;
  temporalWritten: number;
  pg: PgCounters;
}

/** What one side's rounds of a workload cost, in total. */
interface Spent {
  figures: number[];
  runs: number;
  cpu: { app: number; temporal: number; postgres: number };
  /** The process's CPU ms per run of each round (ours; bare: worker and client). */
  appCpuRounds: number[];
  persistenceWrites: number;
  temporalWritten: number;
  /** Exact at once: write transactions (transaction ids taken) and WAL. */
  pgInstant: { writeXacts: number; walBytes: number };
  /** xact_commit + xact_rollback and rows written: only once pg_stat_database settled (ours). */
  pgSettled?: { xacts: number; rows: number };
  history: HistoryTotals;
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
  const { env, target, dir, settings } = await benchSetup('workflows', logger, cleanup);

  const ours = await startOurs(await oursEnv({ ...settings, queue: 'bench-ours', localPureNodes: true }), join(dir, 'ours.log'));
  cleanup.add(() => ours.stop());
  // The same with pure nodes as regular activities: the per-node overhead against bare activities.
  const regular = await startOurs(await oursEnv({ ...settings, queue: 'bench-regular', localPureNodes: false }), join(dir, 'regular.log'));
  cleanup.add(() => regular.stop());
  const bare = await startBare(env.temporalAddress, 'bench-baseline');
  cleanup.add(() => bare.stop());
  logger.warn({ ours: ours.pid, regular: regular.pid, bare: bare.pid, ...env.pids, logs: dir }, 'bench processes');

  // The benchmark's own Temporal client reads histories; its own PostgreSQL connection, statistics.
  const connection = await Connection.connect({ address: env.temporalAddress });
  cleanup.add(() => connection.close());
  const temporal = new Client({ connection });
  const pgStats = await PgStats.connect(env.databaseServer, env.databaseName);
  cleanup.add(() => pgStats.close());
  const metricsUrl = env.pids.temporal ? await findTemporalMetrics(env.pids.temporal) : undefined;
  if (!env.pids.temporal || !env.pids.postgres) logger.warn('servers given by the environment: their CPU is not measured');
  if (!metricsUrl) logger.warn('no Temporal metrics endpoint found: persistence writes are not measured');

  const { call, run: runOurs } = oursApi(ours);
  const { run: runRegular } = oursApi(regular);
  const { oneHttp, httpChain, pureChain } = await benchWorkflows(call, target.url);

  const rows: BenchRow[] = [];

  // The limit: nothing of ours, the cheapest sequential step the server offers.
  const bareChainRound = async (local: boolean) =>
    (await bare.run({ type: 'bareChain', args: [CHAIN, local], total: RUNS_PER_ROUND, concurrency: 1 })).elapsedMs / RUNS_PER_ROUND / CHAIN;
  await bareChainRound(true);
  const limitFigures: number[] = [];
  for (let i = 0; i < ROUNDS; i++) limitFigures.push(await bareChainRound(true));
  const limit = median(limitFigures);
  rows.push({ ...row('limit: what the server can do', 'bare SDK local-activity step, 20-step chain', 'ms', limit, limit, {}), limit: true });
  const perStep = (r: BenchRow) => ({ ...r, perLimit: round(r.ours / limit) });

  // ---------------------------------------------------------------- time and cost

  interface Workload {
    name: string;
    /** What one side's round measures. */
    metric: string;
    unit: string;
    /** Cost per run or per node. */
    per: 'run' | 'node';
    nodesPerRun: number;
    runsPerRound: number;
    ours: { process: OursProcess; round: (runs: number) => Promise<number> };
    bare: (runs: number) => Promise<number>;
    timeRow: (bare: number, ours: number) => BenchRow;
  }
  const workloads: Workload[] = [
    {
      name: `http_request chain, ${HTTP_CHAIN} nodes`,
      metric: 'ms per node',
      unit: 'ms',
      per: 'node',
      nodesPerRun: HTTP_CHAIN,
      runsPerRound: RUNS_PER_ROUND,
      ours: { process: ours, round: async (runs) => (await meanOf(runs, () => runOurs(httpChain))) / HTTP_CHAIN },
      bare: async (runs) =>
        (await bare.run({ type: 'bareHttpChain', args: [HTTP_CHAIN, target.url], total: runs, concurrency: 1 })).elapsedMs / runs / HTTP_CHAIN,
      timeRow: (b, o) =>
        perStep(
          row(
            'sequential regular-activity node',
            `http_request node to a local target, ms per node, ${HTTP_CHAIN}-node chain`,
            'ms',
            b,
            o,
            { max: 1.2 },
            { max: 15 },
          ),
        ),
    },
    {
      name: `no-op chain, ${CHAIN} nodes as activities`,
      metric: 'ms per node',
      unit: 'ms',
      per: 'node',
      nodesPerRun: CHAIN,
      runsPerRound: RUNS_PER_ROUND,
      ours: { process: regular, round: async (runs) => (await meanOf(runs, () => runRegular(pureChain))) / CHAIN },
      bare: async (runs) => (await bare.run({ type: 'bareChain', args: [CHAIN, false], total: runs, concurrency: 1 })).elapsedMs / runs / CHAIN,
      timeRow: (b, o) => perStep(row('per-node overhead', `no-op nodes as activities, ms per node, ${CHAIN}-node chain`, 'ms', b, o, { max: 1.2 })),
    },
    {
      name: `one-node run, concurrency ${CONCURRENCY}`,
      metric: 'runs/s',
      unit: 'runs/s',
      per: 'run',
      nodesPerRun: 1,
      runsPerRound: THROUGHPUT_RUNS,
      ours: {
        process: ours,
        round: async (runs) => {
          const t = performance.now();
          await load(CONCURRENCY, runs, (i) => runOurs(oneHttp, { i }));
          return runs / ((performance.now() - t) / 1000);
        },
      },
      bare: async (runs) => runs / ((await bare.run({ type: 'bareHttpChain', args: [1, target.url], total: runs, concurrency: CONCURRENCY })).elapsedMs / 1000),
      timeRow: (b, o) =>
        row(
          'one-node runs through POST /workflows/{id}/run',
          `runs/s, concurrency ${CONCURRENCY}, ${THROUGHPUT_RUNS} runs, start to all finished (an http_request node; bare: one activity doing the same GET)`,
          'runs/s',
          b,
          o,
          { min: 0.9 },
          { min: 100 },
        ),
    },
  ];

  const reading = async (appPid: number): Promise<Reading> => ({
    at: new Date(),
    cpu: {
      app: cpuMs(appPid),
      temporal: env.pids.temporal ? cpuMs(env.pids.temporal) : NaN,
      postgres: env.pids.postgres ? cpuMs(env.pids.postgres) : NaN,
    },
    ...(metricsUrl ? { persistence: await temporalPersistence(metricsUrl) } : {}),
    temporalWritten: env.pids.temporal ? writtenBytes(env.pids.temporal) : NaN,
    pg: await pgStats.read(),
  });
  const persistenceWrites = (a: Reading, b: Reading) => {
    if (!a.persistence || !b.persistence) return NaN;
    let n = 0;
    for (const [op, count] of b.persistence) if (isWriteOperation(op)) n += count - (a.persistence.get(op) ?? 0);
    return n;
  };
  const emptySpent = (): Spent => ({
    figures: [],
    runs: 0,
    cpu: { app: 0, temporal: 0, postgres: 0 },
    appCpuRounds: [],
    persistenceWrites: 0,
    temporalWritten: 0,
    pgInstant: { writeXacts: 0, walBytes: 0 },
    history: { workflows: 0, events: 0, bytes: 0, stateTransitions: 0 },
  });
  /** One round of one side, between two readings, added to `s`; the histories it left, read after. */
  const spendRound = async (s: Spent, appPid: number, roundOf: (runs: number) => Promise<number>, runs: number): Promise<void> => {
    const before = await reading(appPid);
    s.figures.push(await roundOf(runs));
    const after = await reading(appPid);
    s.runs += runs;
    s.cpu.app += after.cpu.app - before.cpu.app;
    s.cpu.temporal += after.cpu.temporal - before.cpu.temporal;
    s.cpu.postgres += after.cpu.postgres - before.cpu.postgres;
    s.appCpuRounds.push((after.cpu.app - before.cpu.app) / runs);
    s.persistenceWrites += persistenceWrites(before, after);
    s.temporalWritten += after.temporalWritten - before.temporalWritten;
    s.pgInstant.writeXacts += after.pg.nextXid - before.pg.nextXid;
    s.pgInstant.walBytes += after.pg.walBytes - before.pg.walBytes;
    const h = await historiesBetween(temporal, before.at, after.at);
    s.history.workflows += h.workflows;
    s.history.events += h.events;
    s.history.bytes += h.bytes;
    s.history.stateTransitions += h.stateTransitions;
  };

  // Warm every workload up on both sides, then let PostgreSQL's statistics settle (and read what
  // the idle processes cost meanwhile).
  for (const w of workloads) {
    await w.ours.round(Math.min(w.runsPerRound, CONCURRENCY));
    await w.bare(Math.min(w.runsPerRound, CONCURRENCY));
  }
  const idleFrom = await reading(ours.pid);
  const idleRegular = cpuMs(regular.pid);
  const idleBare = cpuMs(bare.pid);
  await sleep(PgStats.settleMs);
  const idleTo = await reading(ours.pid);
  const idleSeconds = (idleTo.at.getTime() - idleFrom.at.getTime()) / 1000;
  logger.warn(
    {
      seconds: round(idleSeconds),
      cpuMsPerSecond: {
        ours: round((idleTo.cpu.app - idleFrom.cpu.app) / idleSeconds),
        regular: round((cpuMs(regular.pid) - idleRegular) / idleSeconds),
        bare: round((cpuMs(bare.pid) - idleBare) / idleSeconds),
        temporal: round((idleTo.cpu.temporal - idleFrom.cpu.temporal) / idleSeconds),
        postgres: round((idleTo.cpu.postgres - idleFrom.cpu.postgres) / idleSeconds),
      },
      pgXactsPerSecond: round((idleTo.pg.xacts - idleFrom.pg.xacts) / idleSeconds),
    },
    'idle: all processes up, no workload',
  );

  // pg_stat_database's count of a workload is read once it has settled (10 s after ours' last
  // transaction): all of it is ours' (the bare SDK writes nothing to PostgreSQL).
  const spent: { workload: Workload; bare: Spent; ours: Spent }[] = [];
  let settled = idleTo.pg;
  let lastOurs = 0;
  const settle = async () => {
    await sleep(Math.max(0, lastOurs + PgStats.settleMs - Date.now()));
    const now = await pgStats.read();
    const previous = spent.at(-1);
    if (previous && !previous.ours.pgSettled) previous.ours.pgSettled = { xacts: now.xacts - settled.xacts, rows: now.rows - settled.rows };
    settled = now;
  };
  // Interleaved: a round of the bare SDK, a round of ours, and again, so that both meet the same
  // machine (two cores, shared) in each stretch of time.
  for (const w of workloads) {
    await settle();
    const b = emptySpent();
    const o = emptySpent();
    for (let i = 0; i < ROUNDS; i++) {
      await spendRound(b, bare.pid, w.bare, w.runsPerRound);
      await spendRound(o, w.ours.process.pid, w.ours.round, w.runsPerRound);
    }
    lastOurs = Date.now();
    logger.warn(
      {
        workload: w.name,
        figures: { bare: b.figures.map(round), ours: o.figures.map(round) },
        cpuMsPerRun: { bare: b.appCpuRounds.map(round), ours: o.appCpuRounds.map(round) },
      },
      'rounds',
    );
    spent.push({ workload: w, bare: b, ours: o });
  }
  await settle();

  // A check of the history counts read from the visibility store: a few one-node runs of each
  // side, their whole histories fetched and their events listed (in the log).
  const sample: Record<'bare' | 'ours', { events: number; types: string[] }[]> = { bare: [], ours: [] };
  const eventsOf = async (workflowId: string) => {
    // Our API may answer from the record a few milliseconds before Temporal closes the run: its history is read once closed.
    const handle = temporal.workflow.getHandle(workflowId);
    await handle.result().catch(() => undefined);
    const events = (await handle.fetchHistory()).events ?? [];
    return {
      events: events.length,
      types: events.map((e) => (proto.temporal.api.enums.v1.EventType[e.eventType ?? 0] ?? String(e.eventType)).replace(/^EVENT_TYPE_/, '')),
    };
  };
  for (let i = 0; i < 3; i++) {
    const [bareId] = (await bare.run({ type: 'bareHttpChain', args: [1, target.url], total: 1, concurrency: 1 })).workflowIds;
    sample.bare.push(await eventsOf(bareId!));
    sample.ours.push(await eventsOf(`bench-ours-execution-${await runOurs(oneHttp, { i })}`));
  }
  logger.warn({ sample }, 'one-node runs: their histories, fetched');
  const sampledEvents = (side: 'bare' | 'ours') => median(sample[side].map((h) => h.events));

  // The table: the limit, each workload's time (pure nodes as local activities beside the no-op
  // chain's), then each workload's cost, then the time-only rows.
  for (const { workload: w, bare: b, ours: o } of spent) {
    const time = w.timeRow(median(b.figures), median(o.figures));
    rows.push({ ...time, metric: `${time.metric} (rounds: bare ${range(b.figures)}, ours ${range(o.figures)})` });
    if (w.nodesPerRun === CHAIN && !COST_ONLY) {
      await runOurs(pureChain);
      const localFigures: number[] = [];
      for (let i = 0; i < ROUNDS; i++) localFigures.push((await meanOf(RUNS_PER_ROUND, () => runOurs(pureChain))) / CHAIN);
      const local = median(localFigures);
      rows.push(perStep(row('pure nodes: local vs regular activities', `ms per node, ${CHAIN}-node chain`, 'ms', median(o.figures), local, { max: 0.35 })));
    }
  }
  for (const { workload: w, bare: b, ours: o } of spent) rows.push(...costOf(w, b, o));
  if (!COST_ONLY) {
    rows.push(...(await webhookRows(ours.api, call, bare)));
    rows.push(...(await delayRows(call, bare, temporal, runOurs)));
  }

  report(rows);

  function costOf(w: Workload, b: Spent, o: Spent): BenchRow[] {
    const units = (s: Spent) => s.runs * (w.per === 'node' ? w.nodesPerRun : 1);
    const per = (s: Spent, v: number) => v / units(s);
    const bench = `cost: ${w.name}`;
    const u = w.per;
    const oneNode = w.per === 'run';
    const added = (metric: string, unit: string, bv: number, ov: number, max?: number): BenchRow => ({
      ...row(bench, metric, unit, bv, ov, {}),
      addedUnit: unit,
      ratio: round(ov - bv),
      ...(max === undefined ? {} : { target: `<= +${max} ${unit}`, pass: ov - bv <= max }),
    });
    const perNode = (v: number) => v / (w.per === 'node' ? w.nodesPerRun : 1);
    const cpuTotal = (s: Spent) => s.cpu.app + s.cpu.temporal + s.cpu.postgres;
    const out: BenchRow[] = [
      row(
        bench,
        `CPU ms per ${u}: our process (API + worker) vs the bare SDK's (worker + client) (rounds: bare ${range(b.appCpuRounds.map(perNode))}, ours ${range(o.appCpuRounds.map(perNode))})`,
        'ms',
        per(b, b.cpu.app),
        per(o, o.cpu.app),
        oneNode ? { max: 1.3 } : {},
      ),
      row(bench, `CPU ms per ${u}: the Temporal server`, 'ms', per(b, b.cpu.temporal), per(o, o.cpu.temporal), {}),
      added(`CPU ms per ${u}: PostgreSQL (postmaster and all its processes)`, 'ms', per(b, b.cpu.postgres), per(o, o.cpu.postgres)),
      row(bench, `CPU ms per ${u}: all three`, 'ms', per(b, cpuTotal(b)), per(o, cpuTotal(o)), {}),
      added(`PostgreSQL transactions per ${u} (xact_commit + xact_rollback)`, 'xacts', 0, per(o, o.pgSettled?.xacts ?? NaN)),
      added(`Temporal history events per ${u}`, 'events', per(b, b.history.events), per(o, o.history.events), oneNode ? 3 : undefined),
      ...(oneNode
        ? [
            {
              ...added('Temporal history events of 3 sampled runs, fetched whole (median)', 'events', sampledEvents('bare'), sampledEvents('ours')),
              detail: true,
            },
          ]
        : []),
      row(bench, `Temporal persistence writes per ${u}`, 'writes', per(b, b.persistenceWrites), per(o, o.persistenceWrites), {}),
      // Details: below the main table.
      { ...added(`PostgreSQL rows inserted + updated + deleted per ${u}`, 'rows', 0, per(o, o.pgSettled?.rows ?? NaN)), detail: true },
      {
        ...added(`PostgreSQL transactions that wrote (transaction ids) per ${u}`, 'xacts', per(b, b.pgInstant.writeXacts), per(o, o.pgInstant.writeXacts)),
        detail: true,
      },
      { ...added(`PostgreSQL WAL KiB per ${u}`, 'KiB', per(b, b.pgInstant.walBytes) / 1024, per(o, o.pgInstant.walBytes) / 1024), detail: true },
      { ...row(bench, `Temporal history KiB per ${u}`, 'KiB', per(b, b.history.bytes) / 1024, per(o, o.history.bytes) / 1024, {}), detail: true },
      {
        ...row(
          bench,
          `Temporal state transitions per ${u} (updates of the runs' mutable state)`,
          'writes',
          per(b, b.history.stateTransitions),
          per(o, o.history.stateTransitions),
          {},
        ),
        detail: true,
      },
      {
        ...row(
          bench,
          `Temporal storage KiB written per ${u} (pages its process dirtied)`,
          'KiB',
          per(b, b.temporalWritten) / 1024,
          per(o, o.temporalWritten) / 1024,
          {},
        ),
        detail: true,
      },
      {
        ...row(bench, `workflow executions Temporal started per run`, 'workflows', b.history.workflows / b.runs, o.history.workflows / o.runs, {}),
        detail: true,
      },
    ];
    return out;
  }
}

/** webhook -> 1-node run -> response at concurrency 1, 10 and 50 (time only). */
async function webhookRows(api: string, call: ReturnType<typeof apiCaller>, bare: BareProcess): Promise<BenchRow[]> {
  const hook = (await call('POST', '/api/workflow/v1/workflows', {
    title: 'Bench hook',
    status: 'active',
    trigger: { type: 'webhook', config: { respond: 'last_node' } },
    nodes: [{ id: 'reply', type: 'transform', config: { value: '{{ trigger.i }}' } }],
  })) as { slug: string; webhook: { secret: string } };
  const url = `${api}/api/workflow/v1/hooks/${hook.slug}`;
  const callHook = async (i: number) => {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-webhook-secret': hook.webhook.secret },
      body: JSON.stringify({ i }),
    });
    if (res.status !== 200) throw new Error(`webhook answered ${res.status}: ${await res.text()}`);
  };
  const bareOne = (total: number, concurrency: number) => bare.run({ type: 'bareOne', args: [], total, concurrency });
  const rows: BenchRow[] = [];
  for (const concurrency of [1, 10, 50]) {
    const total = Math.max(concurrency * 2, Math.round((concurrency === 1 ? 30 : concurrency * 6) * scale));
    const b = { p50: [] as number[], rps: [] as number[] };
    const o = { p50: [] as number[], rps: [] as number[] };
    await bareOne(concurrency, concurrency); // warm-up
    await load(concurrency, concurrency, callHook);
    for (let i = 0; i < ROUNDS; i++) {
      const baseline = await bareOne(total, concurrency);
      const ourRound = await load(concurrency, total, callHook);
      b.p50.push(median(baseline.latencies));
      b.rps.push(total / (baseline.elapsedMs / 1000));
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
  return rows;
}

/**
 * Delay precision: how long a delay node's timeline entry says it waited beyond its duration,
 * beside how late the bare SDK's timer fired (TimerStarted -> TimerFired in its history).
 */
async function delayRows(
  call: ReturnType<typeof apiCaller>,
  bare: BareProcess,
  temporal: Client,
  runOurs: (workflowId: number) => Promise<number>,
): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const ms of [1000, 5000]) {
    const delay: { id: number } = await call('POST', '/api/workflow/v1/workflows', {
      title: `Bench delay ${ms}`,
      trigger: { type: 'manual' },
      nodes: [{ id: 'wait', type: 'delay', config: { duration_ms: ms } }],
    });
    const lateBare: number[] = [];
    const lateOurs: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const [workflowId] = (await bare.run({ type: 'bareSleep', args: [ms], total: 1, concurrency: 1 })).workflowIds;
      const events = (await temporal.workflow.getHandle(workflowId!).fetchHistory()).events ?? [];
      const at = (e: (typeof events)[number] | undefined) => Number(e?.eventTime?.seconds ?? 0) * 1000 + (e?.eventTime?.nanos ?? 0) / 1e6;
      lateBare.push(at(events.find((e) => e.timerFiredEventAttributes)) - at(events.find((e) => e.timerStartedEventAttributes)) - ms);
      const executionId = await runOurs(delay.id);
      const execution = (await call('GET', `/api/workflow/v1/executions/${executionId}`)) as { timeline: { duration_ms: number }[] };
      lateOurs.push(execution.timeline[0]!.duration_ms - ms);
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
  return rows;
}

runMain(main);
