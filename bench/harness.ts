/**
 * Processes and cost counters for the workflow benchmarks (bench/workflows.bench.ts,
 * bench/profile.ts):
 *  - ours: the service as `npm start` runs it (`node --import tsx src/main.ts start`, API and
 *    worker in one process) against the benchmark's PostgreSQL and Temporal, driven over HTTP;
 *  - bare: the baseline workflows' worker and the client that starts them, one process
 *    (bench/bare.ts), driven over its stdin;
 *  - what a workload cost: CPU of each process from /proc (utime + stime, the process's threads
 *    included; a server's reaped children through cutime + cstime and its live ones summed),
 *    PostgreSQL's transactions, rows and WAL from its statistics, the Temporal server's
 *    persistence requests from its own /metrics, and the history of every run Temporal recorded in
 *    the window, from its visibility store.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { Client } from '@temporalio/client';
import proto from '@temporalio/proto';
import pg from 'pg';
import { stopChild, tail, waitFor } from '../src/platform/child-process.js';
import { generateMasterKey } from '../src/platform/crypto.js';
import type { Logger } from '../src/platform/logger.js';
import { bundleWorkflows } from '../src/temporal/worker.js';
import { freePort } from '../test/helpers/ports.js';
import type { BareAnswer, BareCommand } from './bare.js';
import { apiCaller, basicAuth, scratchDir, type cleanups } from './lib.js';
import { benchServers } from './servers.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface OursProcess {
  pid: number;
  /** The API's base URL. */
  api: string;
  /** Where its stdout and stderr (the service's log) go. */
  logFile: string;
  stop(): Promise<void>;
}

/**
 * Starts the service as `npm start` does, with `env` (DATABASE_URL, TEMPORAL_ADDRESS, PORT, ...),
 * and waits until /readyz answers 200. `nodeFlags` go before `--import tsx` (e.g. `--cpu-prof`).
 * Its log goes to `logFile`, as a container's stdout goes to a file.
 */
export async function startOurs(env: Record<string, string>, logFile: string, nodeFlags: string[] = []): Promise<OursProcess> {
  const child = spawn(process.execPath, [...nodeFlags, '--import', 'tsx', 'src/main.ts', 'start'], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const log = createWriteStream(logFile);
  const output = tail(3000);
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.pipe(log, { end: false });
    stream.on('data', (c: Buffer) => output.push(c));
  }
  let exited: string | undefined;
  child.once('exit', (code, signal) => (exited = `exited (${signal ?? code})`));
  const api = `http://127.0.0.1:${env.PORT}`;
  await waitFor(
    `the service (${env.TEMPORAL_TASK_QUEUE})`,
    async () => (await fetch(`${api}/readyz`, { signal: AbortSignal.timeout(2000) }).catch(() => undefined))?.status === 200,
    180_000,
    () => (exited ? `${exited}: ${output.text}` : undefined),
  );
  return {
    pid: child.pid!,
    api,
    logFile,
    stop: async () => {
      // SIGTERM: the orderly stop of `npm start` (a --cpu-prof profile is written on that exit).
      await stopChild(child, 'SIGTERM', 30_000);
      log.end();
    },
  };
}

export interface BareProcess {
  pid: number;
  run(command: Omit<BareCommand, 'id'>): Promise<BareAnswer>;
  stop(): Promise<void>;
}

/** Starts bench/bare.ts against `temporalAddress` and waits until its worker runs; `nodeFlags` as for startOurs. */
export async function startBare(temporalAddress: string, taskQueue: string, nodeFlags: string[] = []): Promise<BareProcess> {
  const child: ChildProcess = spawn(process.execPath, [...nodeFlags, '--import', 'tsx', join(root, 'bench', 'bare.ts')], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', TEMPORAL_ADDRESS: temporalAddress, BARE_TASK_QUEUE: taskQueue },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const output = tail(3000);
  child.stderr!.on('data', (c: Buffer) => output.push(c));
  const pending = new Map<number, (a: BareAnswer) => void>();
  let ready!: () => void;
  let failed!: (err: Error) => void;
  const started = new Promise<void>((resolve, reject) => ((ready = resolve), (failed = reject)));
  createInterface({ input: child.stdout! }).on('line', (line) => {
    // The protocol's lines are JSON; anything else (the Temporal core's own log, which it prints
    // to stdout as the worker shuts down) goes with stderr's tail.
    let message: BareAnswer | { ready: true };
    try {
      message = JSON.parse(line) as BareAnswer | { ready: true };
    } catch {
      output.push(Buffer.from(line + '\n'));
      return;
    }
    if ('ready' in message) return ready();
    pending.get(message.id)?.(message);
    pending.delete(message.id);
  });
  child.once('exit', (code, signal) => {
    const err = new Error(`bench/bare.ts exited (${signal ?? code}): ${output.text}`);
    failed(err);
    for (const resolve of pending.values()) resolve({ id: -1, ok: false, error: err.message, elapsedMs: 0, latencies: [], workflowIds: [] });
  });
  await started;
  let next = 0;
  return {
    pid: child.pid!,
    run: async (command) => {
      const id = ++next;
      const answer = new Promise<BareAnswer>((resolve) => pending.set(id, resolve));
      child.stdin!.write(JSON.stringify({ id, ...command }) + '\n');
      const a = await answer;
      if (!a.ok) throw new Error(`bare ${command.type}: ${a.error}`);
      return a;
    },
    stop: async () => {
      child.stdin!.end();
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      await Promise.race([exited, sleep(15_000)]);
      await stopChild(child, 'SIGTERM', 5000);
    },
  };
}

// ---------------------------------------------------------------- CPU from /proc

const TICK_MS = 1000 / Number(execFileSync('getconf', ['CLK_TCK']).toString().trim() || 100);

/** The fields of /proc/<pid>/stat after the command name (field 3 onward), or undefined when gone. */
function statOf(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/**
 * CPU milliseconds `pid` and its descendants have used so far: utime + stime of each live process
 * (every thread of it included) plus cutime + cstime (its children that ended and were reaped), so
 * a PostgreSQL backend that came and went within the window still counts.
 */
export function cpuMs(pid: number): number {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const ppid = Number(statOf(Number(entry))?.[1]);
    if (ppid) children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
  }
  let ticks = 0;
  const walk = (p: number) => {
    const f = statOf(p);
    // Fields 14-17 of stat (utime, stime, cutime, cstime) are indexes 11-14 here.
    if (f) ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    for (const c of children.get(p) ?? []) walk(c);
  };
  walk(pid);
  return ticks * TICK_MS;
}

/** CPU milliseconds of `pid` alone (utime + stime of its threads), without its children. */
export function ownCpuMs(pid: number): number {
  const f = statOf(pid);
  return f ? (Number(f[11]) + Number(f[12])) * TICK_MS : NaN;
}

/** Bytes the process caused to be written to storage so far (/proc/<pid>/io write_bytes: page-cache pages it dirtied). */
export function writtenBytes(pid: number): number {
  try {
    return Number(/^write_bytes: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))?.[1] ?? NaN);
  } catch {
    return NaN;
  }
}

// ---------------------------------------------------------------- Temporal's own metrics

/** The sockets `pid` listens on (TCP, loopback or any), from /proc. */
function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      // closed while we looked
    }
  }
  const ports: number[] = [];
  for (const file of ['tcp', 'tcp6']) {
    let text = '';
    try {
      text = readFileSync(`/proc/${pid}/net/${file}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      // local_address is "hex-ip:hex-port"; state 0A is LISTEN; the inode is column 10.
      if (cols[3] === '0A' && inodes.has(cols[9]!)) ports.push(parseInt(cols[1]!.split(':')[1]!, 16));
    }
  }
  return ports;
}

/**
 * The URL of the Temporal dev server's Prometheus endpoint: `temporal server start-dev` serves one
 * on a random free port unless told otherwise; it is the one of the process's ports that answers
 * /metrics with the server's persistence counters.
 */
export async function findTemporalMetrics(pid: number): Promise<string | undefined> {
  for (const port of listeningPorts(pid)) {
    const url = `http://127.0.0.1:${port}/metrics`;
    const text = await fetch(url, { signal: AbortSignal.timeout(2000) })
      .then((r) => (r.ok ? r.text() : ''))
      .catch(() => '');
    if (text.includes('persistence_requests')) return url;
  }
  return undefined;
}

/**
 * Persistence requests the Temporal server made so far, by operation (summed over services), from
 * its `persistence_requests` and `visibility_persistence_requests` counters.
 */
export async function temporalPersistence(url: string): Promise<Map<string, number>> {
  const text = await (await fetch(url)).text();
  const counts = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^(visibility_)?persistence_requests\{([^}]*)\} ([0-9.e+]+)$/.exec(line);
    if (!m) continue;
    const op = /operation="([^"]*)"/.exec(m[2]!)?.[1] ?? 'unknown';
    const key = m[1] ? `visibility:${op}` : op;
    counts.set(key, (counts.get(key) ?? 0) + Number(m[3]));
  }
  return counts;
}

/**
 * Whether a persistence operation writes: creating, updating, appending, deleting or completing
 * something (the rest read: Get*, List*, Read*, Assert*, Count*, Scan*).
 */
export const isWriteOperation = (op: string) =>
  /^(visibility:)?(Create|Update|Append|Delete|Complete|RangeComplete|ConflictResolve|Upsert|Record|Put|Set|Save|Insert|Enqueue|Register|Lock|Extend|Renew)/.test(
    op,
  );

// ---------------------------------------------------------------- PostgreSQL's statistics

export interface PgCounters {
  /** xact_commit + xact_rollback of the service's database. */
  xacts: number;
  /** Rows inserted, updated and deleted in it. */
  rows: number;
  /** The next transaction id of the cluster: transactions that wrote something take one each. */
  nextXid: number;
  /** The cluster's WAL position, in bytes. */
  walBytes: number;
}

/**
 * Reads the service database's counters through a connection to the server's `postgres`
 * database, so that reading them adds no transaction to the database they count.
 * pg_stat_database is fed by each backend at most once a second while it works and, once it is
 * idle, 10 s later (PGSTAT_IDLE_INTERVAL); `pg_stat_force_next_flush()` flushes only the calling
 * backend's own counters. So a count is only complete 10 s after the service's last transaction
 * (`settle`). The transaction id and WAL position are exact at once.
 */
export class PgStats {
  private constructor(
    private readonly client: pg.Client,
    private readonly database: string,
  ) {}

  static async connect(serverUrl: string, database: string): Promise<PgStats> {
    const client = new pg.Client({ connectionString: serverUrl });
    await client.connect();
    return new PgStats(client, database);
  }

  /** How long after the service's last transaction pg_stat_database has all of them. */
  static readonly settleMs = 10_500;

  async read(): Promise<PgCounters> {
    // A fresh snapshot of the statistics, not the one cached in this transaction.
    await this.client.query('select pg_stat_clear_snapshot()');
    const { rows } = await this.client.query(
      `select xact_commit + xact_rollback as xacts, tup_inserted + tup_updated + tup_deleted as rows,
              pg_snapshot_xmax(pg_current_snapshot())::text as next_xid, pg_current_wal_lsn() - '0/0'::pg_lsn as wal
         from pg_stat_database where datname = $1`,
      [this.database],
    );
    const r = rows[0] as { xacts: string; rows: string; next_xid: string; wal: string };
    return { xacts: Number(r.xacts), rows: Number(r.rows), nextXid: Number(r.next_xid), walBytes: Number(r.wal) };
  }

  async close(): Promise<void> {
    await this.client.end();
  }
}

// ---------------------------------------------------------------- histories

export interface HistoryTotals {
  /** Workflow executions Temporal started in the window (any task queue). */
  workflows: number;
  events: number;
  bytes: number;
  /** Updates of the runs' mutable state: each one a write of the server's. */
  stateTransitions: number;
}

/**
 * The histories of every workflow execution the Temporal server started between `from` and `to`,
 * from its visibility store (which records each run's history length and size when it closes),
 * read raw (the service's memos are encrypted): waits until none of them is still open, up to
 * `timeoutMs`.
 */
export async function historiesBetween(client: Client, from: Date, to: Date, timeoutMs = 20_000): Promise<HistoryTotals> {
  const query = `StartTime >= "${from.toISOString()}" AND StartTime <= "${to.toISOString()}"`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const totals = { workflows: 0, events: 0, bytes: 0, stateTransitions: 0 };
    let open = 0;
    let nextPageToken: Uint8Array | undefined;
    do {
      const page = await client.workflowService.listWorkflowExecutions({ namespace: client.options.namespace, query, pageSize: 1000, nextPageToken });
      for (const w of page.executions) {
        totals.workflows++;
        totals.events += Number(w.historyLength);
        totals.bytes += Number(w.historySizeBytes);
        totals.stateTransitions += Number(w.stateTransitionCount);
        if (w.status === proto.temporal.api.enums.v1.WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING) open++;
      }
      nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
    } while (nextPageToken);
    if (!open || Date.now() > deadline) return totals;
    await sleep(500);
  }
}

// ---------------------------------------------------------------- the service's side of a workload

export const APP_PASSWORD = 'bench-app-password-0123456789';
export const CHAIN = 20;
export const HTTP_CHAIN = 10;

/** A loopback HTTP server answering every request with a small JSON body: what http_request nodes and bare activities GET. */
export async function startTarget(): Promise<{ url: string; close: () => void }> {
  const server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, close: () => server.close() };
}

/**
 * The environment of a service process as `npm start` runs it (API and worker in one, its
 * defaults, its log at its default level unless BENCH_SVC_LOG_LEVEL says otherwise) on the
 * benchmark's servers and a task queue of its own.
 */
export async function oursEnv(o: {
  databaseUrl: string;
  temporalAddress: string;
  queue: string;
  localPureNodes: boolean;
  key: string;
  bundlePath: string;
  dir: string;
  targetUrl: string;
}): Promise<Record<string, string>> {
  return {
    DATABASE_URL: o.databaseUrl,
    TEMPORAL_ADDRESS: o.temporalAddress,
    TEMPORAL_TASK_QUEUE: o.queue,
    SVC_INSTANCE_ID: o.queue,
    SVC_ENCRYPTION_KEY: o.key,
    SVC_ADMIN_PASSWORD: 'bench-admin-password',
    SVC_ADMIN_APP_PASSWORD: APP_PASSWORD,
    SVC_LOCAL_PURE_NODES: String(o.localPureNodes),
    SVC_WORKFLOW_BUNDLE: o.bundlePath,
    SVC_DATA_DIR: join(o.dir, o.queue),
    // The benchmark's own target, named as an operator names a service on an internal address.
    SVC_EGRESS_ALLOW: o.targetUrl.replace('http://', ''),
    PORT: String(await freePort()),
    HOST: '127.0.0.1',
    SVC_METRICS_PORT: String(await freePort()),
    LOG_LEVEL: process.env.BENCH_SVC_LOG_LEVEL ?? 'info',
  };
}

/** Calls to a service process as a client makes them: Basic auth with the administrator's application password. */
export function oursApi(ours: OursProcess) {
  const authorization = basicAuth('admin', APP_PASSWORD);
  const call = apiCaller(ours.api, authorization);
  /** A run as a client that waits for its result makes it: POST /workflows/{id}/run?wait=true; the execution id. */
  const run = async (workflowId: number, payload: unknown = {}): Promise<number> => {
    const res = await fetch(`${ours.api}/api/workflow/v1/workflows/${workflowId}/run?wait=true&timeout_ms=120000`, {
      method: 'POST',
      headers: { authorization, 'content-type': 'application/json' },
      body: JSON.stringify({ payload }),
    });
    const body = (await res.json()) as { data: { execution_id: number; status?: string } };
    if (res.status !== 200 || body.data.status !== 'success') throw new Error(`run answered ${res.status}: ${JSON.stringify(body)}`);
    return body.data.execution_id;
  };
  return { call, run };
}

/**
 * The workflows of the cost workloads, created through the API: one http_request node to the
 * target; a chain of HTTP_CHAIN of them; a chain of CHAIN no-op (pure transform) nodes.
 */
export async function benchWorkflows(call: ReturnType<typeof apiCaller>, targetUrl: string) {
  const chainOf = (n: number, node: (i: number) => Record<string, unknown>) => ({
    nodes: Array.from({ length: n }, (_, i) => ({ id: `n${i}`, ...node(i) })),
    edges: Array.from({ length: n - 1 }, (_, i) => ({ from: `n${i}`, to: `n${i + 1}` })),
  });
  const define = async (def: Record<string, unknown>): Promise<number> =>
    ((await call('POST', '/api/workflow/v1/workflows', { trigger: { type: 'manual' }, ...def })) as { id: number }).id;
  const connection = (await call('POST', '/api/workflow/v1/connections', {
    type: 'http_bearer',
    label: 'target',
    cred: 'bench-token',
    extra: { base_url: targetUrl },
  })) as { id: number };
  const httpNode = { type: 'http_request', connection_id: connection.id, config: { method: 'GET', path: '/' } };
  return {
    oneHttp: await define({ title: 'Bench one', nodes: [{ id: 'only', ...httpNode }] }),
    httpChain: await define({ title: 'Bench http chain', ...chainOf(HTTP_CHAIN, () => httpNode) }),
    pureChain: await define({ title: 'Bench chain', ...chainOf(CHAIN, (i) => ({ type: 'transform', config: { value: i } })) }),
  };
}

/**
 * The webhook workflow the peer benchmark and the breakdown measure, created through the API: a
 * webhook trigger answering with the last node's output (`respond: "last_node"`) and one
 * http_request node GETting the target (through a connection, as every http_request node does).
 */
export async function webhookWorkflow(call: ReturnType<typeof apiCaller>, targetUrl: string) {
  const connection = (await call('POST', '/api/workflow/v1/connections', {
    type: 'http_bearer',
    label: 'webhook target',
    cred: 'bench-token',
    extra: { base_url: targetUrl },
  })) as { id: number };
  const hook = (await call('POST', '/api/workflow/v1/workflows', {
    title: 'Webhook to HTTP',
    status: 'active',
    trigger: { type: 'webhook', config: { respond: 'last_node' } },
    nodes: [{ id: 'get', type: 'http_request', connection_id: connection.id, config: { method: 'GET', path: '/' } }],
  })) as { id: number; slug: string; webhook: { secret: string } };
  return { connectionId: connection.id, workflowId: hook.id, path: `/api/workflow/v1/hooks/${hook.slug}`, secret: hook.webhook.secret };
}

/**
 * What most benchmarks start with: the benchmark's PostgreSQL and Temporal servers, the local HTTP
 * target, a scratch directory holding the workflow bundle, and the settings of a service process
 * on them (oursEnv's, but for the queue and localPureNodes); all of it on `cleanup`'s list.
 */
export async function benchSetup(name: string, logger: Logger, cleanup: ReturnType<typeof cleanups>) {
  const env = await benchServers(name, logger);
  cleanup.add(() => env.stop());
  const target = await startTarget();
  cleanup.add(() => target.close());
  const dir = scratchDir(`svc-bench-${name.replace(/_/g, '-')}-`);
  cleanup.add(() => rmSync(dir, { recursive: true, force: true }));
  const bundlePath = join(dir, 'bundle.js');
  await writeFile(bundlePath, (await bundleWorkflows()).code);
  const settings = { databaseUrl: env.databaseUrl, temporalAddress: env.temporalAddress, key: generateMasterKey(), bundlePath, dir, targetUrl: target.url };
  return { env, target, dir, settings };
}
