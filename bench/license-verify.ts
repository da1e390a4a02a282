/**
 * Licence verify: req/s and p99 of the real API against a bare Koa route doing the same indexed
 * lookup through `pg` (targets: >= 0.8x req/s, p99 <= 1.3x).
 *
 *   node --import tsx bench/license-verify.ts
 *
 * Uses DATABASE_URL (a scratch database is created on that server and dropped afterwards) or
 * starts an embedded PostgreSQL in a temporary directory. Both servers run as child processes of
 * this one, on loopback; this process generates the load. Our server runs as in production:
 * TRUST_PROXY=true and the licence rate limit (SVC_LICENSE_RATE_LIMIT, default 60 per minute per
 * address) counted in PostgreSQL; the load is spread over many X-Forwarded-For addresses so that
 * no address reaches the limit. Bounded: BENCH_SECONDS per round (default 5), BENCH_ROUNDS
 * (default 3), at most BENCH_MAX_REQUESTS per round, and a hard deadline of 5 minutes.
 */
import { report, row } from './lib.js';
import { fork, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Router from '@koa/router';
import Koa from 'koa';
import { koaBody } from 'koa-body';
import pg from 'pg';
import { loadConfig } from '../src/config.js';
import { migrate } from '../src/db/orm.js';
import { buildApp } from '../src/http/app.js';
import { KeyRing, generateMasterKey, parseMasterKey } from '../src/platform/crypto.js';
import { EmbeddedPostgres } from '../src/platform/embedded-postgres.js';
import { createLogger } from '../src/platform/logger.js';
import { closeServices, createServices } from '../src/services.js';
import { ensureDatabase } from '../src/stack.js';

const LICENSES = 10_000;
const ADDRESSES = 60_000;
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const MAX_REQUESTS = Number(process.env.BENCH_MAX_REQUESTS ?? 200_000);
const DEADLINE_MS = 5 * 60_000;

const VERIFY_SQL = `select l.status, l.expires_at, l.domain_limit, l.product_slug, l.product_name,
        exists (select 1 from license_activations a
                 where a.license_id = l.id and a.site_fingerprint = $1 and a.status = 'active') as site_match
   from licenses l where l.token_hash = $2`;

const tokenOf = (i: number) => `bench-token-${String(i).padStart(8, '0')}-${'x'.repeat(22)}`;
const fingerprintOf = (i: number) => createHash('sha256').update(`site-${i}`).digest('hex');
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

// ---- servers (child processes) -----------------------------------------------------------------

/** The real service: the same buildApp as `svc api`, Temporal never touched by these routes. */
async function serveOurs(databaseUrl: string): Promise<number> {
  const config = loadConfig({
    ...process.env,
    DATABASE_URL: databaseUrl,
    TRUST_PROXY: 'true',
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
    SVC_ENCRYPTION_KEY: generateMasterKey(),
    PORT: '0',
  });
  // Request logs are written as in production, to a sink, so the terminal stays readable.
  const logger = createLogger(config.LOG_LEVEL, { write: () => true } as never);
  const services = await createServices(config, logger, new KeyRing(parseMasterKey(config.SVC_ENCRYPTION_KEY!)), {
    databaseUrl,
    temporalAddress: '127.0.0.1:1',
  });
  const { app } = buildApp(services);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((ok) => server.once('listening', ok));
  process.once('disconnect', () => {
    server.close();
    void closeServices(services);
  });
  return (server.address() as { port: number }).port;
}

/**
 * The baseline: a bare Koa route with the same body parser and the same query through pg, as
 * one would write it (`prepared` = false). With `prepared`, the query is a named prepared
 * statement, as ours is; that variant is reported for information, to show how much of the
 * comparison is owed to preparing statements rather than to the rest of the stack.
 */
async function serveBaseline(databaseUrl: string, prepared: boolean): Promise<number> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 20 });
  const app = new Koa();
  const router = new Router();
  router.post('/api/portal/v1/licenses/:key/verify', async (ctx) => {
    const body = (ctx.request as unknown as { body?: Record<string, string> }).body ?? {};
    const values = [body.site_fingerprint ?? null, sha256(ctx.params.key!)];
    const { rows } = await pool.query(prepared ? { name: 'verify', text: VERIFY_SQL, values } : { text: VERIFY_SQL, values });
    const row = rows[0];
    if (!row) {
      ctx.status = 404;
      ctx.body = { status: 'fail', error: 'license_not_found' };
      return;
    }
    ctx.body = {
      status: 'ok',
      license_status: 'active',
      expires_at: row.expires_at ? (row.expires_at as Date).toISOString().slice(0, 19).replace('T', ' ') : null,
      domain_limit: row.domain_limit,
      site_match: row.site_match,
      product_slug: row.product_slug,
      product_name: row.product_name,
    };
  });
  app.use(koaBody({ urlencoded: true, json: true }));
  app.use(router.routes());
  const server = app.listen(0, '127.0.0.1');
  await new Promise((ok) => server.once('listening', ok));
  process.once('disconnect', () => {
    server.close();
    void pool.end();
  });
  return (server.address() as { port: number }).port;
}

// ---- orchestration -----------------------------------------------------------------------------

async function prepareDatabase(url: string): Promise<void> {
  const logger = createLogger('warn');
  const config = loadConfig({ DATABASE_URL: url, SVC_ENCRYPTION_KEY: generateMasterKey(), LOG_LEVEL: 'warn' });
  const services = await createServices(config, logger, new KeyRing(parseMasterKey(config.SVC_ENCRYPTION_KEY!)), {
    databaseUrl: url,
    temporalAddress: '127.0.0.1:1',
  });
  await migrate(services.orm);
  await closeServices(services);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const ids = Array.from({ length: LICENSES }, (_, i) => i);
  await client.query(
    `insert into licenses (token_hash, token_hint, reference_id, status, expires_at, domain_limit, product_slug, product_name)
     select h, right(t, 4), 'lic_' || lpad(i::text, 20, 'a'), case when i % 10 = 0 then 'grace' else 'active' end,
            now() + interval '365 days', 3, 'bench-product', 'Bench Product'
       from unnest($1::text[], $2::text[], $3::int[]) as x(h, t, i)`,
    [ids.map((i) => sha256(tokenOf(i))), ids.map(tokenOf), ids],
  );
  // Every other licence has one active site, so half the lookups find a match.
  await client.query(
    `insert into license_activations (id, license_id, site_fingerprint, site_url, domain, counts_slot, status, activated_at)
     select 'act_' || l.id, l.id, f, 'https://site-' || x.i || '.example', 'site-' || x.i || '.example', true, 'active', now()
       from unnest($1::int[], $2::text[]) as x(i, f) join licenses l on l.token_hash = encode(sha256(convert_to($3 || lpad(x.i::text, 8, '0') || $4, 'UTF8')), 'hex')`,
    [ids.filter((i) => i % 2 === 0), ids.filter((i) => i % 2 === 0).map(fingerprintOf), 'bench-token-', `-${'x'.repeat(22)}`],
  );
  const { rows } = await client.query('select count(*)::int as n from license_activations');
  if (rows[0].n !== LICENSES / 2) throw new Error(`expected ${LICENSES / 2} activations, got ${rows[0].n}`);
  await client.query('analyze');
  await client.end();
}

/**
 * CPU microseconds used so far by an embedded PostgreSQL (the postmaster and its backends), from
 * /proc; undefined with DATABASE_URL, whose server may not be on this machine.
 */
function postgresCpu(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  const stats = new Map<number, { ppid: number; ticks: number }>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // utime + stime, and for the postmaster also cutime + cstime: backends that have exited.
      const own = Number(fields[11]) + Number(fields[12]);
      stats.set(Number(entry), { ppid: Number(fields[1]), ticks: Number(entry) === pid ? own + Number(fields[13]) + Number(fields[14]) : own });
    } catch {
      // the process ended while we looked
    }
  }
  let ticks = 0;
  for (const [p, stat] of stats) if (p === pid || stat.ppid === pid) ticks += stat.ticks;
  return (ticks * 1_000_000) / 100; // USER_HZ is 100 on Linux
}

const kinds = ['baseline', 'prepared', 'ours'] as const;
type Kind = (typeof kinds)[number];

interface Server {
  child: ChildProcess;
  port: number;
}

/** Microseconds of CPU the server process has used so far. */
function cpuOf(server: Server, command: 'cpu' | 'profile-start' | 'profile-stop' = 'cpu'): Promise<number> {
  return new Promise((ok) => {
    server.child.once('message', (m) => {
      const { cpu } = m as { cpu: NodeJS.CpuUsage };
      ok(cpu.user + cpu.system);
    });
    server.child.send(command);
  });
}

function startServer(kind: Kind, databaseUrl: string): Promise<Server> {
  const child = fork(fileURLToPath(import.meta.url), ['--serve', kind], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, BENCH_DATABASE_URL: databaseUrl },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  return new Promise((ok, fail) => {
    child.once('message', (m) => ok({ child, port: (m as { port: number }).port }));
    child.once('exit', (code) => fail(new Error(`${kind} server exited (${code})`)));
  });
}

/** Disconnecting lets a server close and exit by itself (and write its CPU profile); kill after 10 s. */
async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((ok) => child.once('exit', ok));
  child.disconnect();
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

interface RoundResult {
  requests: number;
  errors: number;
  seconds: number;
  p50: number;
  p99: number;
  /** Server CPU per request, microseconds. */
  cpuPerRequest: number;
  /** PostgreSQL CPU per request, microseconds (embedded PostgreSQL only). */
  pgCpuPerRequest: number;
}

let postgresPid: number | undefined;

let addressCounter = 0;

/** A closed loop of CONCURRENCY clients for SECONDS (or MAX_REQUESTS), each request from a fresh address. */
async function round(server: Server, seconds: number): Promise<RoundResult> {
  const { port } = server;
  const cpuBefore = await cpuOf(server);
  const pgBefore = postgresCpu(postgresPid);
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const latencies: number[] = [];
  let errors = 0;
  let sent = 0;
  const started = performance.now();
  const until = started + seconds * 1000;
  const one = (i: number) =>
    new Promise<void>((ok) => {
      const n = addressCounter++ % ADDRESSES;
      const body = i % 2 === 0 ? `site_fingerprint=${fingerprintOf(i)}` : '';
      const t0 = performance.now();
      const req = request(
        {
          agent,
          host: '127.0.0.1',
          port,
          method: 'POST',
          path: `/api/portal/v1/licenses/${tokenOf(i)}/verify`,
          headers: {
            'content-type': 'application/x-www-form-urlencoded',
            'content-length': Buffer.byteLength(body),
            'x-forwarded-for': `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`,
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            latencies.push(performance.now() - t0);
            const text = Buffer.concat(chunks).toString();
            if (res.statusCode !== 200 || (i % 2 === 0 && !text.includes('"site_match":true'))) errors++;
            ok();
          });
        },
      );
      req.on('error', () => {
        errors++;
        ok();
      });
      req.end(body);
    });
  const worker = async () => {
    while (performance.now() < until && sent < MAX_REQUESTS) {
      sent++;
      await one(Math.floor(Math.random() * LICENSES));
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const elapsed = (performance.now() - started) / 1000;
  agent.destroy();
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN;
  const cpu = (await cpuOf(server)) - cpuBefore;
  const pgCpu = pgBefore === undefined ? NaN : postgresCpu(postgresPid)! - pgBefore;
  return {
    requests: latencies.length,
    errors,
    seconds: elapsed,
    p50: at(0.5),
    p99: at(0.99),
    cpuPerRequest: cpu / latencies.length,
    pgCpuPerRequest: pgCpu / latencies.length,
  };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

async function orchestrate(): Promise<void> {
  const deadline = setTimeout(() => {
    process.stderr.write('benchmark: hard deadline reached\n');
    process.exit(1);
  }, DEADLINE_MS);
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    let serverUrl = process.env.DATABASE_URL;
    if (!serverUrl) {
      const dir = await mkdtemp(join(tmpdir(), 'svc-bench-'));
      // PostgreSQL runs as the postgres user when we are root; it must be able to enter this dir.
      await chmod(dir, 0o755);
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      const pgServer = new EmbeddedPostgres({ dataDir: join(dir, 'pg'), port: 15_400 + Math.floor(Math.random() * 500), logger: createLogger('warn') });
      serverUrl = await pgServer.start();
      postgresPid = pgServer.pid;
      cleanups.push(() => pgServer.stop());
    }
    const name = `svc_bench_${randomBytes(4).toString('hex')}`;
    const databaseUrl = await ensureDatabase(serverUrl, name);
    cleanups.push(async () => {
      const admin = new pg.Client({ connectionString: serverUrl });
      await admin.connect();
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.end();
    });
    process.stderr.write(`preparing ${LICENSES} licences...\n`);
    await prepareDatabase(databaseUrl);
    const servers = {} as Record<Kind, Server>;
    for (const kind of kinds) {
      servers[kind] = await startServer(kind, databaseUrl);
      cleanups.push(() => stopServer(servers[kind].child));
    }

    // Warm every server (JIT, pools, caches), then rotate the order each round so that drift on
    // a shared machine hits all of them alike.
    for (const kind of kinds) await round(servers[kind], 1);
    const results: Record<Kind, RoundResult[]> = { baseline: [], prepared: [], ours: [] };
    for (const kind of kinds) await cpuOf(servers[kind], 'profile-start');
    for (let r = 0; r < ROUNDS; r++) {
      for (let k = 0; k < kinds.length; k++) {
        const kind = kinds[(k + r) % kinds.length]!;
        const result = await round(servers[kind], SECONDS);
        results[kind].push(result);
        process.stderr.write(
          `round ${r + 1} ${kind}: ${(result.requests / result.seconds).toFixed(0)} req/s, p99 ${result.p99.toFixed(2)} ms, ` +
            `CPU us/request: server ${result.cpuPerRequest.toFixed(0)}, PostgreSQL ${result.pgCpuPerRequest.toFixed(0)}; errors ${result.errors}\n`,
        );
      }
    }
    for (const kind of kinds) await cpuOf(servers[kind], 'profile-stop');
    const summary = (kind: Kind) => ({
      rps: median(results[kind].map((x) => x.requests / x.seconds)),
      p50: median(results[kind].map((x) => x.p50)),
      p99: median(results[kind].map((x) => x.p99)),
      cpu: median(results[kind].map((x) => x.cpuPerRequest)),
      pgCpu: median(results[kind].map((x) => x.pgCpuPerRequest)),
      errors: results[kind].reduce((n, x) => n + x.errors, 0),
    });
    const b = summary('baseline');
    const p = summary('prepared');
    const o = summary('ours');
    const fmt = (v: number, digits = 0) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');
    const ratio = (x: number, y: number) => (Number.isFinite(x / y) ? `${(x / y).toFixed(2)}x` : 'n/a');
    const rows: [string, number, number, number, string, boolean | undefined, number][] = [
      ['req/s', b.rps, p.rps, o.rps, '>= 0.8x', o.rps / b.rps >= 0.8, 0],
      ['p99 ms', b.p99, p.p99, o.p99, '<= 1.3x', o.p99 / b.p99 <= 1.3, 2],
      ['p50 ms', b.p50, p.p50, o.p50, '', undefined, 2],
      ['server CPU us/req', b.cpu, p.cpu, o.cpu, '', undefined, 0],
      ['PostgreSQL CPU us/req', b.pgCpu, p.pgCpu, o.pgCpu, '', undefined, 0],
    ];
    const lines = [
      `licence verify: concurrency ${CONCURRENCY}, ${ROUNDS} rounds x ${SECONDS} s (medians), ${LICENSES} licences, ` +
        `rate limit ${loadConfig(process.env).SVC_LICENSE_RATE_LIMIT}/min per address over ${ADDRESSES} X-Forwarded-For addresses`,
      '| figure | baseline: bare Koa + pg | ours | ours / baseline | target | | info: baseline with a prepared statement | ours / that |',
      '|---|---|---|---|---|---|---|---|',
      ...rows.map(
        ([figure, base, prep, mine, target, ok, digits]) =>
          `| ${figure} | ${fmt(base, digits)} | ${fmt(mine, digits)} | ${ratio(mine, base)} | ${target} | ${ok === undefined ? '' : ok ? 'met' : 'MISSED'} | ${fmt(prep, digits)} | ${ratio(mine, prep)} |`,
      ),
      `errors (non-200 or wrong site_match): baseline ${b.errors}, prepared ${p.errors}, ours ${o.errors}`,
    ];
    process.stdout.write(lines.join('\n') + '\n');
    report(
      [
        row('licence verify', 'req/s (rate limit per address applied)', 'req/s', b.rps, o.rps, { min: 0.8 }),
        row('licence verify', 'p99 latency', 'ms', b.p99, o.p99, { max: 1.3 }),
      ],
      false,
    );
    if (b.errors || p.errors || o.errors) process.exitCode = 1;
  } finally {
    clearTimeout(deadline);
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  }
}

const serve = process.argv.indexOf('--serve');
if (serve >= 0) {
  const kind = process.argv[serve + 1];
  const url = process.env.BENCH_DATABASE_URL!;
  const port = await (kind === 'ours' ? serveOurs(url) : serveBaseline(url, kind === 'prepared'));
  // CPU time of the server process, so each round can report its cost per request. With
  // BENCH_CPU_PROF=DIR the measured rounds (not start-up or warm-up) are also profiled into
  // DIR/<kind>.cpuprofile, to see where the time goes.
  const profileDir = process.env.BENCH_CPU_PROF;
  const session = profileDir ? new (await import('node:inspector/promises')).Session() : undefined;
  process.on('message', async (message) => {
    if (message === 'profile-start' && session) {
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.start');
    }
    if (message === 'profile-stop' && session) {
      const { profile } = await session.post('Profiler.stop');
      await (await import('node:fs/promises')).writeFile(join(profileDir!, `${kind}.cpuprofile`), JSON.stringify(profile));
    }
    process.send!({ cpu: process.cpuUsage() });
  });
  process.send!({ port });
} else {
  await orchestrate();
}
