/**
 * Faults under load (`npm run faults`; test/faults.test.ts runs a shorter pass).
 *
 * Starts PostgreSQL (embedded, on disk), a file-backed Temporal dev server, `svc api` and
 * `svc worker` as separate processes, then keeps a steady stream of workflow runs going through
 * the API while it, in turn: SIGKILLs the worker and starts a new one, restarts the Temporal dev
 * server on the same database file, and restarts PostgreSQL on the same data directory.
 *
 * Afterwards it checks what a user relies on:
 *  - every request was answered within the hang limit, with a 2xx or the 503 envelope;
 *  - while Temporal or PostgreSQL was down, the API said so with 503 `service_unavailable`;
 *  - every request, retried with its Idempotency-Key after a 503 as a client should, gets exactly
 *    one run, which finishes successfully;
 *  - no execution row is left running, and none exists that no request's key accounts for;
 *  - no completed node ran twice: each side effect was performed as many times as the timeline
 *    counts attempts of that node;
 *  - the API process never died.
 *
 * Load is on loopback only and bounded: `rate` runs per second for the scenario's duration.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { EmbeddedPostgres } from '../src/platform/embedded-postgres.js';
import { generateMasterKey } from '../src/platform/crypto.js';
import { createLogger } from '../src/platform/logger.js';
import { TemporalDevServer, provisionTemporalCli } from '../src/platform/temporal-server.js';
import { ensureDatabase } from '../src/stack.js';
import { bundleWorkflows } from '../src/temporal/worker.js';
import { TARGET_HOST, startHttpTarget, type HttpTarget } from '../test/helpers/http-target.js';
import { freePort } from '../test/helpers/ports.js';
import { stopChild, tail, waitFor } from '../src/platform/child-process.js';
import { apiCaller, basicAuth, percentile, runMain, scratchDir } from './lib.js';

const root = fileURLToPath(new URL('..', import.meta.url));

export interface FaultOptions {
  /** Seconds of steady load before, between and after the faults. */
  calmSeconds: number;
  /** Seconds each dependency stays down. */
  outageSeconds: number;
  /** Runs started per second. */
  rate: number;
  /** A request unanswered after this long counts as a hang. */
  hangMs: number;
  /** How long the runs may take to finish once the faults are over. */
  drainMs: number;
  log: (line: string) => void;
}

export const defaultFaultOptions: FaultOptions = {
  calmSeconds: 8,
  outageSeconds: 8,
  rate: 4,
  hangMs: 15_000,
  drainMs: 180_000,
  log: (l) => process.stderr.write(l + '\n'),
};

interface Attempt {
  /** The phase the request was sent in. */
  phase: string;
  /** The phase its answer (or its failure) came in: a dependency may have gone down in between. */
  answeredIn?: string;
  /** The Idempotency-Key of the request this attempt belongs to. */
  key: string;
  at: number;
  ms: number;
  status: number;
  error?: string;
  executionId?: number;
  envelope?: boolean;
}

export interface FaultReport {
  requests: number;
  accepted: number;
  /**
   * 503 answers, by the phase the answer came in (a request sent just before a dependency went
   * down is answered while it is down) and the phase the request was sent in.
   */
  unavailable: { phase: string; sentIn: string; dependency: string | undefined }[];
  /** Requests answered with something other than 2xx or the 503 envelope, or not at all. */
  unexpected: Attempt[];
  hangs: Attempt[];
  latency: { p50: number; p99: number; max: number };
  /** Milliseconds from a dependency being back to the API's first accepted run. */
  recoveryMs: Record<string, number>;
  /** Phase -> status -> count. */
  byPhase: Record<string, Record<string, number>>;
  finals: Record<string, number>;
  notFinished: number[];
  notSuccessful: { id: number; status: string; error: unknown }[];
  /** Requests (keys) that got more than one execution id. */
  duplicateRows: number;
  /** Idempotency keys whose client never got a 2xx. */
  gaveUp: string[];
  /** Rows no request accounts for: every row must be the run of one request's key. */
  unexplainedRows: number[];
  /** Accepted runs without a row. */
  lostRuns: number[];
  /** Runs whose side effects outnumber the attempts recorded for the node. */
  repeatedNodes: { id: number; node: string; hits: number; attempts: number }[];
  apiExits: string[];
  /** Worker processes that ended other than by the scenario's own SIGKILL or stop. */
  workerExits: string[];
  problems: string[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function spawnSvc(command: 'api' | 'worker', env: Record<string, string>, onExit: (why: string) => void): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', command, '--json'], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const output = tail(1500);
  child.stderr!.on('data', (c: Buffer) => output.push(c));
  child.once('exit', (code, signal) => onExit(`${command} exited (${signal ?? code}): ${output.text}`));
  return child;
}

const killHard = (child: ChildProcess | undefined) => stopChild(child, 'SIGKILL');
const stopGently = (child: ChildProcess | undefined) => stopChild(child, 'SIGTERM', 20_000);

export async function runFaultScenario(partial: Partial<FaultOptions> = {}): Promise<FaultReport> {
  const o = { ...defaultFaultOptions, ...partial };
  const logger = createLogger(process.env.FAULTS_LOG_LEVEL ?? 'warn');
  const dir = scratchDir('svc-faults-');
  const stops: (() => Promise<void>)[] = [];
  const apiExits: string[] = [];
  const workerExits: string[] = [];
  const problems: string[] = [];
  let target: HttpTarget | undefined;
  try {
    o.log('faults: starting PostgreSQL, Temporal (file-backed), the API and a worker');
    const pgServer = new EmbeddedPostgres({ dataDir: join(dir, 'pg'), port: await freePort(), logger });
    const server = await pgServer.start();
    stops.push(() => pgServer.stop());
    const temporal = new TemporalDevServer({
      cli: await provisionTemporalCli(logger, process.env.TEMPORAL_CLI),
      port: await freePort(),
      uiPort: 0,
      headless: true,
      dbFile: join(dir, 'temporal.db'),
      logger,
    });
    const temporalAddress = await temporal.start();
    stops.push(() => temporal.stop());
    const databaseUrl = await ensureDatabase(server, 'faults');
    const bundlePath = join(dir, 'workflows.js');
    await writeFile(bundlePath, (await bundleWorkflows()).code);

    const appPassword = 'faults-app-password-0123456789';
    const port = await freePort();
    const api = `http://127.0.0.1:${port}`;
    const env = {
      DATABASE_URL: databaseUrl,
      TEMPORAL_ADDRESS: temporalAddress,
      TEMPORAL_TASK_QUEUE: 'faults',
      SVC_INSTANCE_ID: 'faults',
      SVC_ENCRYPTION_KEY: generateMasterKey(),
      SVC_WORKFLOW_BUNDLE: bundlePath,
      SVC_ADMIN_APP_PASSWORD: appPassword,
      PORT: String(port),
      HOST: '127.0.0.1',
      // The scenario's HTTP target listens there (test/helpers/http-target.ts).
      SVC_EGRESS_ALLOW: TARGET_HOST,
      // Workers come and go on one machine: none serves a metrics port.
      SVC_METRICS_PORT: 'off',
      LOG_LEVEL: process.env.FAULTS_LOG_LEVEL ?? 'error',
    };
    let stopping = false;
    const apiProcess = spawnSvc('api', env, (why) => !stopping && apiExits.push(why));
    stops.push(async () => {
      stopping = true;
      await stopGently(apiProcess);
    });
    await waitFor('the API', async () => (await fetch(`${api}/readyz`, { signal: AbortSignal.timeout(2000) }).catch(() => undefined))?.status === 200, 120_000);
    const startWorker = () => {
      const child = spawnSvc('worker', env, (why) => !stopping && child !== killed && workerExits.push(why));
      return child;
    };
    let killed: ChildProcess | undefined;
    let worker: ChildProcess | undefined = startWorker();
    stops.push(async () => {
      stopping = true;
      await stopGently(worker);
    });

    target = await startHttpTarget();
    const auth = { authorization: basicAuth('admin', appPassword), 'content-type': 'application/json' };
    const call = apiCaller(api, auth.authorization);
    const post = (path: string, body: unknown) => call('POST', path, body) as Promise<{ id: number }>;
    const connection = await post('/api/workflow/v1/connections', {
      type: 'http_bearer',
      label: 'target',
      cred: 'faults-credential',
      extra: { base_url: target.url },
    });
    const hit = (id: string) => ({ id, type: 'http_request', connection_id: connection.id, config: { method: 'POST', path: `/${id}/{{ execution.id }}` } });
    const workflow = await post('/api/workflow/v1/workflows', {
      title: 'Faults under load',
      trigger: { type: 'manual' },
      nodes: [hit('first'), { id: 'shape', type: 'transform', config: { value: { n: '{{ trigger.n }}', first: '{{ nodes.first.status }}' } } }, hit('second')],
      edges: [
        { from: 'first', to: 'shape' },
        { from: 'shape', to: 'second' },
      ],
    });

    // The steady load: one run every 1/rate seconds, each request on its own, none awaited by the next.
    let phase = 'calm';
    let backAt: Record<'temporal' | 'postgresql', number> | undefined;
    const attempts: Attempt[] = [];
    const inFlight = new Set<Promise<void>>();
    let n = 0;
    // Each run request is a client that does what the API asks of one: it sends an
    // Idempotency-Key and, answered 503, retries with the same key until it gets its run.
    let retrying = true;
    const fire = () => {
      const key = `fault-run-${++n}`;
      const payload = JSON.stringify({ payload: { n } });
      const p = (async () => {
        for (;;) {
          const a: Attempt = { phase, at: Date.now(), ms: 0, status: 0, key };
          attempts.push(a);
          const started = performance.now();
          try {
            const res = await fetch(`${api}/api/workflow/v1/workflows/${workflow.id}/run`, {
              method: 'POST',
              headers: { ...auth, 'idempotency-key': key },
              body: payload,
              signal: AbortSignal.timeout(o.hangMs),
            });
            a.status = res.status;
            const text = await res.text();
            const json = JSON.parse(text) as { status?: string; error?: string; data?: { execution_id?: number; dependency?: string } };
            if (res.status < 300) a.executionId = json.data?.execution_id;
            else {
              a.envelope = json.status === 'fail' && typeof json.error === 'string';
              a.error = `${json.error}${json.data?.dependency ? ` (${json.data.dependency})` : ''}`;
            }
          } catch (err) {
            a.error = (err as Error).name === 'TimeoutError' ? 'hang' : (err as Error).message;
          } finally {
            a.ms = performance.now() - started;
            a.answeredIn = phase;
          }
          if (a.executionId !== undefined || a.status !== 503 || !retrying) return;
          await sleep(1000);
        }
      })();
      inFlight.add(p);
      void p.finally(() => inFlight.delete(p));
    };
    const ticker = setInterval(fire, 1000 / o.rate);
    const calm = async (label: string) => {
      phase = label;
      await sleep(o.calmSeconds * 1000);
    };

    try {
      await calm('calm');
      o.log('faults: SIGKILL the worker');
      phase = 'worker down';
      killed = worker;
      await killHard(worker);
      await sleep(o.outageSeconds * 1000);
      worker = startWorker();
      await calm('after worker restart');

      o.log('faults: restart the Temporal dev server');
      phase = 'temporal down';
      await temporal.stop();
      await sleep(o.outageSeconds * 1000);
      await temporal.start();
      const temporalBack = Date.now();
      await calm('after temporal restart');

      o.log('faults: restart PostgreSQL');
      phase = 'postgresql down';
      await pgServer.stop();
      await sleep(o.outageSeconds * 1000);
      await pgServer.start();
      const postgresBack = Date.now();
      await calm('after postgresql restart');
      backAt = { temporal: temporalBack, postgresql: postgresBack };
    } finally {
      clearInterval(ticker);
    }
    // Clients still retrying get a while longer; after that they give up.
    const giveUp = setTimeout(() => (retrying = false), 60_000);
    await Promise.all([...inFlight]);
    clearTimeout(giveUp);

    // Every accepted run must finish; read the mirror straight from PostgreSQL.
    o.log(`faults: ${attempts.length} requests sent; waiting for the runs to finish`);
    const db = new pg.Client({ connectionString: databaseUrl });
    await db.connect();
    type Row = { id: string; status: string; error: unknown };
    let rows: Row[] = [];
    const drainDeadline = Date.now() + o.drainMs;
    while (Date.now() < drainDeadline) {
      rows = (await db.query<Row>('select id, status, error from executions where workflow_id = $1 order by id', [workflow.id])).rows;
      if (!rows.some((r) => r.status === 'running')) break;
      await sleep(1000);
    }
    const nodes = (
      await db.query<{ execution_id: string; node_id: string; attempts: number; status: string }>(
        'select execution_id, node_id, attempts, status from execution_nodes where execution_id = any($1)',
        [rows.map((r) => r.id)],
      )
    ).rows;
    await db.end();

    // One execution per key, however often its client retried.
    const idsByKey = new Map<string, Set<number>>();
    for (const a of attempts) if (a.executionId !== undefined) idsByKey.set(a.key, (idsByKey.get(a.key) ?? new Set()).add(a.executionId));
    const accepted = [...idsByKey.values()].flatMap((ids) => [...ids]);
    const acceptedSet = new Set(accepted);
    const keys = new Set(attempts.map((a) => a.key));
    const byId = new Map(rows.map((r) => [Number(r.id), r]));
    const latencies = attempts.filter((a) => a.status).map((a) => a.ms);
    const byPhase: FaultReport['byPhase'] = {};
    for (const a of attempts) {
      const key = a.status ? String(a.status) : (a.error ?? 'no answer');
      byPhase[a.phase] = { ...byPhase[a.phase], [key]: (byPhase[a.phase]?.[key] ?? 0) + 1 };
    }
    const finals: Record<string, number> = {};
    for (const r of rows) finals[r.status] = (finals[r.status] ?? 0) + 1;
    const refused = attempts.filter((a) => a.status === 503);
    const repeatedNodes: FaultReport['repeatedNodes'] = [];
    for (const id of accepted) {
      for (const node of ['first', 'second']) {
        const hits = target.count(`/${node}/${id}`);
        const recorded = nodes.find((x) => Number(x.execution_id) === id && x.node_id === node);
        if (hits > (recorded?.attempts ?? 0) || (byId.get(id)?.status === 'success' && hits === 0))
          repeatedNodes.push({ id, node, hits, attempts: recorded?.attempts ?? 0 });
      }
    }
    // How long after a dependency came back the API started accepting runs again.
    const recovery = Object.fromEntries(
      Object.entries(backAt ?? {}).map(([dependency, at]) => {
        const first = attempts.find((a) => a.at >= at && a.status >= 200 && a.status < 300);
        return [dependency, first ? Math.round(first.at + first.ms - at) : Infinity];
      }),
    );
    const report: FaultReport = {
      recoveryMs: recovery,
      requests: attempts.length,
      accepted: accepted.length,
      unavailable: refused.map((a) => ({ phase: a.answeredIn ?? a.phase, sentIn: a.phase, dependency: a.error })),
      unexpected: attempts.filter((a) => !(a.status >= 200 && a.status < 300) && !(a.status === 503 && a.envelope)),
      hangs: attempts.filter((a) => a.error === 'hang'),
      latency: { p50: Math.round(percentile(latencies, 50)), p99: Math.round(percentile(latencies, 99)), max: Math.round(Math.max(...latencies)) },
      byPhase,
      finals,
      notFinished: rows.filter((r) => r.status === 'running').map((r) => Number(r.id)),
      notSuccessful: accepted
        .filter((id) => byId.get(id) && byId.get(id)!.status !== 'success')
        .map((id) => ({ id, status: byId.get(id)!.status, error: byId.get(id)!.error })),
      duplicateRows: [...idsByKey.values()].filter((ids) => ids.size > 1).length,
      gaveUp: [...keys].filter((k) => !idsByKey.has(k)),
      unexplainedRows: rows.filter((r) => !acceptedSet.has(Number(r.id))).map((r) => Number(r.id)),
      lostRuns: accepted.filter((id) => !byId.has(id)),
      repeatedNodes,
      apiExits,
      workerExits,
      problems,
    };
    if (!report.unavailable.some((u) => u.phase === 'temporal down')) problems.push('no 503 while Temporal was down');
    if (!report.unavailable.some((u) => u.phase === 'postgresql down')) problems.push('no 503 while PostgreSQL was down');
    if (report.unexpected.length) problems.push(`${report.unexpected.length} requests answered neither 2xx nor the 503 envelope`);
    if (report.hangs.length) problems.push(`${report.hangs.length} requests unanswered after ${o.hangMs} ms`);
    if (report.notFinished.length) problems.push(`${report.notFinished.length} runs still running after ${o.drainMs} ms`);
    if (report.notSuccessful.length) problems.push(`${report.notSuccessful.length} accepted runs did not succeed`);
    if (report.duplicateRows) problems.push(`${report.duplicateRows} requests got more than one execution (a retry with the same key started another run)`);
    if (report.gaveUp.length) problems.push(`${report.gaveUp.length} requests never got their run although their clients retried for a minute after the load`);
    if (report.unexplainedRows.length) problems.push(`${report.unexplainedRows.length} execution rows no request accounts for`);
    if (report.lostRuns.length) problems.push(`${report.lostRuns.length} accepted runs have no execution row`);
    if (report.repeatedNodes.length) problems.push(`${report.repeatedNodes.length} node side effects ran more often than recorded`);
    if (apiExits.length) problems.push('the API process died');
    for (const [dependency, ms] of Object.entries(recovery))
      if (ms > 15_000) problems.push(`the API accepted runs again only ${ms} ms after ${dependency} was back`);
    if (workerExits.length) problems.push('a worker process died');
    if (accepted.length < o.rate * o.calmSeconds) problems.push(`only ${accepted.length} runs were accepted: the load did not get through`);
    return report;
  } finally {
    for (const stop of stops.reverse()) await stop().catch((err) => problems.push(`stopping: ${(err as Error).message}`));
    await target?.close();
  }
}

export function describeReport(r: FaultReport): string {
  const lines = [
    `requests ${r.requests}, accepted ${r.accepted}, refused with 503 ${r.unavailable.length}; latency p50 ${r.latency.p50} ms, p99 ${r.latency.p99} ms, max ${r.latency.max} ms`,
    ...Object.entries(r.byPhase).map(
      ([phase, counts]) =>
        `  ${phase}: ${Object.entries(counts)
          .map(([k, v]) => `${k} x${v}`)
          .join(', ')}`,
    ),
    `back to accepting runs after a restart: ${Object.entries(r.recoveryMs)
      .map(([k, v]) => `${k} ${v} ms`)
      .join(', ')}`,
    `final statuses: ${Object.entries(r.finals)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
    r.problems.length
      ? `PROBLEMS:\n  ${r.problems.join('\n  ')}`
      : 'no problems: every accepted run finished once, no completed node ran twice, outages answered 503',
  ];
  if (r.unexpected.length) lines.push(`unexpected answers: ${JSON.stringify(r.unexpected.slice(0, 5))}`);
  if (r.notSuccessful.length) lines.push(`not successful: ${JSON.stringify(r.notSuccessful.slice(0, 5))}`);
  if (r.repeatedNodes.length) lines.push(`repeated nodes: ${JSON.stringify(r.repeatedNodes.slice(0, 5))}`);
  if (r.apiExits.length) lines.push(`API exits: ${r.apiExits.join('\n')}`);
  if (r.workerExits.length) lines.push(`worker exits: ${r.workerExits.join('\n')}`);
  return lines.join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  runMain(async () => {
    const report = await runFaultScenario();
    process.stdout.write(describeReport(report) + '\n');
    if (report.problems.length) throw new Error('fault scenario found problems');
  });
}
