/**
 * `npm run bench -- cluster`: the production topology (`npm run cluster`: the Temporal server on
 * PostgreSQL configured from deploy/, two APIs and two workers in their own processes) beside
 * the embedded default (`npm start`: API and worker in one process, the Temporal CLI's dev server
 * on SQLite), both running on this machine at the same time and measured in alternation, each
 * round on both, each measurement once both servers are quiet again:
 *  - a sequential http_request node: a 10-node chain of them against a local target, started
 *    through the API, ms per node (median of the round's runs);
 *  - one-node runs through POST /workflows/{id}/run at concurrency 50, start to all finished
 *    (the cluster's requests spread over both APIs);
 *  - during that load, the CPU each process (API, worker, Temporal, PostgreSQL) spent per run,
 *    and PostgreSQL commits per run.
 * Both keep their data durably (PostgreSQL with fsync, the dev server's SQLite synced), as a
 * user runs them. Each figure is the median of BENCH_ROUNDS rounds (default 3, after a warm-up);
 * the table also gives each figure's range over the rounds, the noise of this machine.
 * Run: node --import tsx bench/cluster.bench.ts
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import pg from 'pg';
import { startCluster, projectRoot, type Cluster } from '../src/cluster/cluster.js';
import { loadConfig } from '../src/config.js';
import { stopChild, tail, waitFor } from '../src/platform/child-process.js';
import { KeyRing, generateMasterKey, parseMasterKey } from '../src/platform/crypto.js';
import { createLogger } from '../src/platform/logger.js';
import { EncryptionCodec } from '../src/temporal/codec.js';
import { clientDataConverter } from '../src/temporal/data-converter.js';
import { freePort } from '../test/helpers/ports.js';
import { apiCaller, basicAuth, load, median, report, round, row, runMain, scratchDir, type BenchRow } from './lib.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CHAIN = 10;
const CHAIN_RUNS = Number(process.env.BENCH_CHAIN_RUNS ?? 6);
const THROUGHPUT_RUNS = Number(process.env.BENCH_THROUGHPUT_RUNS ?? 200);
const CONCURRENCY = 50;
const APP_PASSWORD = 'bench-cluster-app-password-01';
const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');

/** CPU time (ms) of a process and every live descendant; a reaped child's time is in its parent's. */
function cpuMs(root: number | undefined): number {
  if (!root) return 0;
  const stats = new Map<number, { ppid: number; ticks: number }>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // utime, stime, cutime, cstime are fields 14 to 17 (here 11 to 14, after pid, comm, state).
      stats.set(Number(entry), { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]) });
    } catch {
      // gone meanwhile
    }
  }
  let ticks = 0;
  const walk = (pid: number) => {
    ticks += stats.get(pid)?.ticks ?? 0;
    for (const [child, s] of stats) if (s.ppid === pid) walk(child);
  };
  walk(root);
  return ticks * 10; // USER_HZ is 100 on Linux
}

/** CPU time (ms) of one process alone, not its children. */
function ownCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** The processes of a topology, grouped as the table reports them: a pid and whether its descendants count. */
type Groups = Record<'service' | 'temporal' | 'postgresql', { pid: number; tree: boolean }[]>;

function cpuOf(groups: Groups): Record<keyof Groups, number> {
  const sum = (ps: Groups[keyof Groups]) => ps.reduce((a, p) => a + (p.tree ? cpuMs(p.pid) : ownCpuMs(p.pid)), 0);
  return { service: sum(groups.service), temporal: sum(groups.temporal), postgresql: sum(groups.postgresql) };
}

interface Topology {
  name: string;
  apis: string[];
  temporal: Client;
  databaseUrl: string;
  groups(): Groups;
  stop(): Promise<void>;
}

/** `npm start` as a user runs it, in its own process with its own data directory and ports. */
/** The benchmark's HTTP target, which the service may call only when SVC_EGRESS_ALLOW names it. */
let targetHost = '';

async function embeddedDefault(): Promise<Topology> {
  const dir = scratchDir('svc-bench-embedded-');
  const port = await freePort();
  const key = generateMasterKey();
  const output = tail(4000);
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', 'start'], {
    cwd: projectRoot,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      SVC_DATA_DIR: dir,
      PORT: String(port),
      HOST: '127.0.0.1',
      TEMPORAL_PORT: String(await freePort()),
      TEMPORAL_UI_PORT: String(await freePort()),
      SVC_CODEC_PORT: String(await freePort()),
      SVC_EMBEDDED_PG_PORT: String(await freePort()),
      SVC_ENCRYPTION_KEY: key,
      SVC_ADMIN_APP_PASSWORD: APP_PASSWORD,
      SVC_EGRESS_ALLOW: targetHost,
      LOG_LEVEL: 'warn',
      ...(process.env.TEMPORAL_CLI ? { TEMPORAL_CLI: process.env.TEMPORAL_CLI } : {}),
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', (c) => output.push(c));
  let exited: string | undefined;
  child.once('exit', (code, signal) => (exited = `exited (${signal ?? code})`));
  const api = `http://127.0.0.1:${port}`;
  await waitFor(
    'npm start',
    async () => (await fetch(`${api}/readyz`).catch(() => undefined))?.status === 200,
    300_000,
    () => (exited ? `${exited}: ${output.text}` : undefined),
  );
  const banner = output.text;
  const temporalAddress = /Temporal:\s+(\S+)/.exec(banner)![1]!;
  const databaseUrl = /PostgreSQL:\s+(\S+)/.exec(banner)![1]!.replace('***', encodeURIComponent(readFileSync(join(dir, 'pg.password'), 'utf8').trim()));
  const connection = await Connection.connect({ address: temporalAddress });
  const temporal = new Client({ connection, dataConverter: clientDataConverter(new EncryptionCodec(new KeyRing(parseMasterKey(key)))) });
  const childrenOf = (pid: number) =>
    readdirSync('/proc')
      .filter((e) => /^\d+$/.test(e))
      .flatMap((e) => {
        try {
          const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
          return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid
            ? [{ pid: Number(e), comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) }]
            : [];
        } catch {
          return [];
        }
      });
  const kids = childrenOf(child.pid!);
  return {
    name: 'embedded default',
    apis: [api],
    temporal,
    databaseUrl,
    groups: () => ({
      // The svc process alone (API and worker); its children are the other two.
      service: [{ pid: child.pid!, tree: false }],
      temporal: kids.filter((k) => k.comm.startsWith('temporal')).map((k) => ({ pid: k.pid, tree: true })),
      postgresql: kids.filter((k) => k.comm.startsWith('postgres')).map((k) => ({ pid: k.pid, tree: true })),
    }),
    async stop() {
      await connection.close();
      await stopChild(child, 'SIGTERM', 60_000);
    },
  };
}

/** `npm run cluster`'s topology (the same startCluster), on free ports in a scratch directory. */
async function cluster(name: string, deployDir?: string): Promise<Topology> {
  const dir = scratchDir('svc-bench-cluster-');
  const low = async () => {
    // Temporal keeps membership ports in a smallint column.
    for (;;) {
      const p = 20_000 + Math.floor(Math.random() * 12_000);
      const free = await new Promise<boolean>((ok) => {
        const s = createServer();
        s.once('error', () => ok(false));
        s.listen(p, '127.0.0.1', () => s.close(() => ok(true)));
      });
      if (free) return p;
    }
  };
  const handle: Cluster = await startCluster({
    config: loadConfig({ SVC_DATA_DIR: dir, SVC_ADMIN_APP_PASSWORD: APP_PASSWORD, HOST: '127.0.0.1', LOG_LEVEL: 'warn' }),
    logger,
    dataDir: dir,
    ports: {
      api: [await freePort(), await freePort()],
      postgres: await freePort(),
      temporal: await freePort(),
      temporalHistory: await freePort(),
      temporalMatching: await freePort(),
      temporalWorker: await freePort(),
      membership: { frontend: await low(), history: await low(), matching: await low(), worker: await low() },
      temporalMetrics: await freePort(),
      workerMetrics: [await freePort(), await freePort()],
      ui: await freePort(),
    },
    serviceLogs: 'files',
    supervise: false,
    baseEnv: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', LOG_LEVEL: 'warn', SVC_EGRESS_ALLOW: targetHost },
    ...(deployDir ? { deployDir } : {}),
  });
  const connection = await Connection.connect({ address: handle.temporalAddress });
  const temporal = new Client({ connection, dataConverter: clientDataConverter(new EncryptionCodec(new KeyRing(parseMasterKey(handle.encryptionKey)))) });
  return {
    name,
    apis: handle.urls.apis.map((u) => u.replace('localhost', '127.0.0.1')),
    temporal,
    databaseUrl: handle.databaseUrl,
    groups: () => ({
      service: [...handle.apis, ...handle.workers].map((p) => ({ pid: p.pid!, tree: true })),
      temporal: [{ pid: handle.temporal.pid!, tree: true }],
      postgresql: [{ pid: handle.postgres!.pid()!, tree: true }],
    }),
    async stop() {
      await connection.close();
      await handle.stop();
    },
  };
}

async function commits(databaseUrl: string): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    return Number((await client.query<{ n: string }>('select sum(xact_commit) as n from pg_stat_database')).rows[0]!.n);
  } finally {
    await client.end();
  }
}

interface Round {
  perNode: number;
  runsPerSecond: number;
  cpu: Record<keyof Groups, number>;
  commits: number;
}

async function main() {
  const target = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
  await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
  const targetUrl = `http://127.0.0.1:${(target.address() as { port: number }).port}`;
  targetHost = targetUrl.replace('http://', '');
  process.stderr.write('cluster bench: starting the embedded default and the cluster\n');
  // BENCH_CLUSTER_VARIANTS=before=/tmp/deploy-before,after=deploy runs one cluster per variant of
  // the deploy/ files beside the embedded default (how the settings in deploy/ were compared).
  const variants = (process.env.BENCH_CLUSTER_VARIANTS ?? 'cluster=').split(',').map((v) => v.split('=') as [string, string]);
  const topologies = await Promise.all([embeddedDefault(), ...variants.map(([name, dir]) => cluster(name, dir || undefined))]);
  const prepared = await Promise.all(
    topologies.map(async (t) => {
      const call = apiCaller(t.apis[0]!, basicAuth('admin', APP_PASSWORD));
      const connection = await call('POST', '/api/workflow/v1/connections', {
        type: 'http_bearer',
        label: 'target',
        cred: 'bench',
        extra: { base_url: targetUrl },
      });
      const chain = await call('POST', '/api/workflow/v1/workflows', {
        title: 'Bench http chain',
        trigger: { type: 'manual' },
        nodes: Array.from({ length: CHAIN }, (_, i) => ({
          id: `n${i}`,
          type: 'http_request',
          connection_id: connection.id,
          config: { method: 'GET', path: '/' },
        })),
        edges: Array.from({ length: CHAIN - 1 }, (_, i) => ({ from: `n${i}`, to: `n${i + 1}` })),
      });
      const one = await call('POST', '/api/workflow/v1/workflows', {
        title: 'Bench one',
        trigger: { type: 'manual' },
        nodes: [{ id: 'only', type: 'transform', config: { value: '{{ trigger.i }}' } }],
        edges: [],
      });
      return { t, chain: chain.id as number, one: one.id as number };
    }),
  );
  const headers = { authorization: basicAuth('admin', APP_PASSWORD), 'content-type': 'application/json' };
  let next = 0;
  const startRun = async (t: Topology, workflowId: number, payload: unknown) => {
    const api = t.apis[next++ % t.apis.length]!;
    const res = await fetch(`${api}/api/workflow/v1/workflows/${workflowId}/run`, { method: 'POST', headers, body: JSON.stringify({ payload }) });
    if (res.status !== 202) throw new Error(`${t.name}: run answered ${res.status}: ${await res.text()}`);
    const { data } = (await res.json()) as { data: { execution_id: number } };
    return t.temporal.workflow.getHandle(`svc-execution-${data.execution_id}`);
  };

  const chainLatency = async ({ t, chain }: (typeof prepared)[number]): Promise<number> => {
    const perNode: number[] = [];
    for (let i = 0; i < CHAIN_RUNS; i++) {
      const started = performance.now();
      await (await startRun(t, chain, {})).result();
      perNode.push((performance.now() - started) / CHAIN);
    }
    return median(perNode);
  };
  const throughput = async ({ t, one }: (typeof prepared)[number]): Promise<Omit<Round, 'perNode'>> => {
    const cpuBefore = cpuOf(t.groups());
    const commitsBefore = await commits(t.databaseUrl);
    const started = performance.now();
    const results: Promise<unknown>[] = [];
    await load(CONCURRENCY, THROUGHPUT_RUNS, async (i) => results.push((await startRun(t, one, { i })).result()));
    await Promise.all(results);
    const seconds = (performance.now() - started) / 1000;
    const cpuAfter = cpuOf(t.groups());
    const commitsAfter = await commits(t.databaseUrl);
    const perRun = (k: keyof Groups) => (cpuAfter[k] - cpuBefore[k]) / THROUGHPUT_RUNS;
    return {
      runsPerSecond: THROUGHPUT_RUNS / seconds,
      cpu: { service: perRun('service'), temporal: perRun('temporal'), postgresql: perRun('postgresql') },
      commits: (commitsAfter - commitsBefore - 2) / THROUGHPUT_RUNS,
    };
  };

  // Work a burst leaves behind (timers coming due, visibility, task clean-up) would slow whatever
  // is measured next: each measurement waits until both topologies' servers are quiet.
  const settle = async () => {
    const busy = () =>
      topologies.reduce((a, t) => {
        const c = cpuOf(t.groups());
        return a + c.temporal + c.postgresql;
      }, 0);
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      const before = busy();
      await new Promise((r) => setTimeout(r, 1000));
      if (busy() - before < 100) return; // under a tenth of a core over the last second
    }
  };
  const rounds: Round[][] = topologies.map(() => []);
  for (let r = 0; r <= ROUNDS; r++) {
    // Alternate which goes first, so none always meets the others' leftovers.
    const order = topologies.map((_, i) => i);
    if (r % 2) order.reverse();
    const figures: Partial<Round>[] = topologies.map(() => ({}));
    for (const i of order) {
      await settle();
      figures[i] = { ...figures[i], perNode: await chainLatency(prepared[i]!) };
    }
    for (const i of order) {
      await settle();
      figures[i] = { ...figures[i], ...(await throughput(prepared[i]!)) };
    }
    for (const i of order) {
      const f = figures[i] as Round;
      process.stderr.write(
        `${r === 0 ? 'warm-up' : `round ${r}`} ${topologies[i]!.name}: ${round(f.perNode)} ms/node, ${round(f.runsPerSecond)} runs/s, CPU ms/run ${JSON.stringify(Object.fromEntries(Object.entries(f.cpu).map(([k, v]) => [k, round(v)])))}, ${round(f.commits)} commits/run\n`,
      );
      if (r > 0) rounds[i]!.push(f);
    }
  }

  const embedded = rounds[0]!;
  const pick = (rs: Round[], f: (r: Round) => number) => rs.map(f);
  const span = (xs: number[]) => `${round(Math.min(...xs))}–${round(Math.max(...xs))}`;
  const total = (r: Round) => r.cpu.service + r.cpu.temporal + r.cpu.postgresql;
  const rows: BenchRow[] = [];
  topologies.slice(1).forEach((t, v) => {
    const clustered = rounds[v + 1]!;
    const figure = (name: string, unit: string, f: (r: Round) => number, target: { max?: number; min?: number }): BenchRow => {
      const b = pick(embedded, f);
      const o = pick(clustered, f);
      return row(`${t.name} beside the embedded default`, `${name} (rounds: embedded ${span(b)}, cluster ${span(o)})`, unit, median(b), median(o), target);
    };
    rows.push(
      figure(`sequential http_request node, ms per node, ${CHAIN}-node chain`, 'ms', (r) => r.perNode, { max: 1.2 }),
      figure(`one-node runs/s, concurrency ${CONCURRENCY}, ${THROUGHPUT_RUNS} runs, start to all finished`, 'runs/s', (r) => r.runsPerSecond, { min: 1 }),
      figure('CPU per run: API and worker processes', 'ms', (r) => r.cpu.service, {}),
      figure('CPU per run: Temporal server', 'ms', (r) => r.cpu.temporal, {}),
      figure('CPU per run: PostgreSQL', 'ms', (r) => r.cpu.postgresql, {}),
      figure('CPU per run: all of it', 'ms', total, {}),
      figure('PostgreSQL commits per run', 'commits', (r) => r.commits, {}),
    );
  });
  report(rows);
  for (const t of topologies) await t.stop();
  target.close();
}

runMain(main);
