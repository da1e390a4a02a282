/**
 * Records benchmark: an entity of 8 fields and a relation with BENCH_ROWS
 * records (default 1,000,000). Compares the real API with a bare Koa route that runs the same SQL
 * through `pg`, both in one child process on loopback:
 *   - list with an EQL filter on an indexed field, a sort and per_page=50 (target: p50 <= 1.5x,
 *     req/s >= 0.6x of the baseline);
 *   - the same list with include=company on a page of 200;
 *   - a bulk call of 100 creates.
 *
 *   node --import tsx bench/records-list.ts
 *
 * Uses DATABASE_URL's server when set (it creates and drops a database of its own), otherwise an
 * embedded PostgreSQL in a temporary directory. BENCH_ROWS, BENCH_REQUESTS (sequential latency
 * samples per side), BENCH_SECONDS (throughput phase per side), BENCH_CONCURRENCY tune it.
 */
import { report, row } from './lib.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { loadConfig } from '../src/config.js';
import { migrate, openOrm } from '../src/db/orm.js';
import { generateMasterKey, KeyRing, parseMasterKey } from '../src/platform/crypto.js';
import { EmbeddedPostgres } from '../src/platform/embedded-postgres.js';
import { createLogger } from '../src/platform/logger.js';
import { closeServices, createServices } from '../src/services.js';
import { closeAgent, latency, summarise, throughput, warmUp, type Figures, type Target } from './load.js';
import { COMPANY, FILTER, INSERT_COLUMNS, ITEM, serve, SORT } from './records-servers.js';

const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const ROWS = env('BENCH_ROWS', 1_000_000);
const REQUESTS = env('BENCH_REQUESTS', 400);
const SECONDS = env('BENCH_SECONDS', 6);
const CONCURRENCY = env('BENCH_CONCURRENCY', 8);
const COMPANIES = 1000;
const logger = createLogger(process.env.LOG_LEVEL ?? 'warn');

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

async function database(stops: (() => Promise<unknown>)[]): Promise<string> {
  let serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) {
    const dir = await mkdtemp(join(tmpdir(), 'svc-bench-'));
    await chmod(dir, 0o755); // PostgreSQL runs as the postgres user when we are root
    const server = new EmbeddedPostgres({ dataDir: join(dir, 'pg'), port: await freePort(), logger, ephemeral: true });
    serverUrl = await server.start();
    stops.push(
      () => rm(dir, { recursive: true, force: true }),
      () => server.stop(),
    );
  }
  const name = `svc_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  stops.push(async () => {
    const c = new pg.Client({ connectionString: serverUrl });
    await c.connect();
    await c.query(`drop database if exists ${name} with (force)`);
    await c.end();
  });
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Schema, a user with an application password, the two entities, then the rows in bulk SQL. */
async function prepare(databaseUrl: string, key: string): Promise<{ password: string; companyId: string }> {
  const orm = await openOrm(databaseUrl, logger, 2);
  await migrate(orm);
  await orm.close(true);
  const config = loadConfig({ DATABASE_URL: databaseUrl, SVC_ENCRYPTION_KEY: key, TEMPORAL_ADDRESS: '127.0.0.1:1', LOG_LEVEL: 'silent' });
  const services = await createServices(config, logger, new KeyRing(parseMasterKey(key)), { databaseUrl, temporalAddress: '127.0.0.1:1' });
  await services.users.createUser({ login: 'bench', role: 'administrator' });
  const { password } = await services.users.createAppPassword('bench', 'bench');
  await services.entities.create({
    slug: COMPANY,
    name: 'Company',
    schema: { fields: { name: { type: 'string', required: true, unique: true }, country: { type: 'string' } } },
  });
  await services.entities.create({
    slug: ITEM,
    name: 'Item',
    schema: {
      fields: {
        name: { type: 'string', required: true },
        email: { type: 'string', format: 'email', unique: true },
        age: { type: 'integer' },
        score: { type: 'number' },
        active: { type: 'boolean' },
        stage: { type: 'enum', values: ['lead', 'customer', 'partner'] },
        born_on: { type: 'date' },
        seen_at: { type: 'datetime' },
        company: { type: 'relation', entity: COMPANY },
      },
    },
    lists: { default: { columns: ['name', 'email'], sort: 'seen_at:desc' }, by_age: { columns: ['name', 'age'], sort: 'age:asc' } },
  });
  await closeServices(services);
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const started = performance.now();
  let companyId: string;
  try {
    await client.query(
      `insert into records.e_${COMPANY} (name, country) select 'Company ' || g, (array['fr','de','us'])[1 + g % 3] from generate_series(1, ${COMPANIES}) g`,
    );
    await client.query(
      `
      insert into records.e_${ITEM} (name, email, age, score, active, stage, born_on, seen_at, company)
      select 'Item ' || g, 'item' || g || '@bench.test', (g::bigint * 7919) % 100, ((g::bigint * 104729) % 10000) / 100.0, g % 2 = 0,
             (array['lead','customer','partner'])[1 + g % 3], date '1950-01-01' + (g % 20000),
             timestamptz '2024-01-01T00:00:00Z' + g * interval '17 seconds', c.ids[1 + g % ${COMPANIES}]
        from generate_series(1, $1::int) g, (select array_agg(uuid order by name) as ids from records.e_${COMPANY}) c`,
      [ROWS],
    );
    await client.query('vacuum analyze');
    companyId = (await client.query(`select uuid from records.e_${COMPANY} limit 1`)).rows[0].uuid;
  } finally {
    await client.end();
  }
  console.log(`loaded ${ROWS.toLocaleString('en')} records in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return { password, companyId };
}

function startServers(databaseUrl: string, key: string): Promise<{ child: ChildProcess; ours: string; baseline: string; sql: Record<string, string> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--serve'], {
    env: { ...process.env, BENCH_DATABASE_URL: databaseUrl, BENCH_KEY: key },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`server process exited (${code})`)));
    createInterface({ input: child.stdout! }).once('line', (line) => resolve({ child, ...JSON.parse(line) }));
  });
}

interface Scenario {
  name: string;
  ours: Target;
  baseline: Target;
  requests: number;
  seconds: number;
}

/** Alternates baseline and ours twice, so drift on a shared machine hits both alike. */
async function measure(s: Scenario): Promise<{ baseline: Figures; ours: Figures }> {
  await warmUp(s.baseline, 20);
  await warmUp(s.ours, 20);
  const samples = { baseline: [] as number[], ours: [] as number[] };
  const rates = { baseline: [] as number[], ours: [] as number[] };
  for (let round = 0; round < 2; round++) {
    for (const side of ['baseline', 'ours'] as const) {
      samples[side].push(...(await latency(s[side], Math.ceil(s.requests / 2))));
      rates[side].push(await throughput(s[side], CONCURRENCY, s.seconds / 2, s.requests * 20));
    }
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return { baseline: summarise(samples.baseline, mean(rates.baseline)), ours: summarise(samples.ours, mean(rates.ours)) };
}

function table(rows: { name: string; baseline: Figures; ours: Figures }[]): string {
  const lines = ['| scenario | metric | baseline | ours | ratio | target |', '|---|---|---:|---:|---:|---|'];
  for (const { name, baseline, ours } of rows) {
    const p50 = ours.p50 / baseline.p50;
    const rps = ours.rps / baseline.rps;
    lines.push(`| ${name} | p50 ms | ${baseline.p50.toFixed(2)} | ${ours.p50.toFixed(2)} | ${p50.toFixed(2)}x | <= 1.5x ${p50 <= 1.5 ? 'met' : 'MISSED'} |`);
    lines.push(`|  | p95 ms | ${baseline.p95.toFixed(2)} | ${ours.p95.toFixed(2)} | ${(ours.p95 / baseline.p95).toFixed(2)}x | |`);
    lines.push(`|  | req/s | ${baseline.rps.toFixed(0)} | ${ours.rps.toFixed(0)} | ${rps.toFixed(2)}x | >= 0.6x ${rps >= 0.6 ? 'met' : 'MISSED'} |`);
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  const stops: (() => Promise<unknown>)[] = [];
  let child: ChildProcess | undefined;
  // Bounded in time whatever happens: a stuck run is killed with everything it started.
  const watchdog = setTimeout(() => {
    console.error('benchmark exceeded 30 minutes; stopping');
    child?.kill('SIGKILL');
    process.exitCode = 1;
  }, 30 * 60_000);
  watchdog.unref();
  try {
    const databaseUrl = await database(stops);
    const key = generateMasterKey();
    const { password, companyId } = await prepare(databaseUrl, key);
    const servers = await startServers(databaseUrl, key);
    child = servers.child;
    const headers = { authorization: `Basic ${Buffer.from(`bench:${password}`).toString('base64')}` };
    const records = `${servers.ours}/api/management/v1/records/${ITEM}`;
    const list = `eql=${encodeURIComponent(FILTER)}&sort=${encodeURIComponent(SORT)}`;
    let next = 0;
    const bulkBody = () =>
      JSON.stringify(
        Array.from({ length: 100 }, () => {
          const n = ++next;
          const values: (string | number | boolean)[] = [
            `Bulk ${n}`,
            `bulk${n}@bench.test`,
            n % 100,
            n / 7,
            n % 2 === 0,
            'lead',
            '2001-02-03',
            '2024-05-06T07:08:09Z',
            companyId,
          ];
          return { op: 'create', fields: Object.fromEntries(INSERT_COLUMNS.map((c, i) => [c, values[i]])) };
        }),
      );
    const scenarios: Scenario[] = [
      {
        name: `list \`${FILTER}\` + sort ${SORT}, per_page=50`,
        ours: { method: 'GET', url: `${records}?${list}&per_page=50`, headers, expectStatus: 200 },
        baseline: { method: 'GET', url: `${servers.baseline}/list?per_page=50`, expectStatus: 200 },
        requests: REQUESTS,
        seconds: SECONDS,
      },
      {
        name: 'same list, include=company, per_page=200',
        ours: { method: 'GET', url: `${records}?${list}&per_page=200&include=company`, headers, expectStatus: 200 },
        baseline: { method: 'GET', url: `${servers.baseline}/list?per_page=200&include=company`, expectStatus: 200 },
        requests: Math.ceil(REQUESTS / 2),
        seconds: SECONDS,
      },
      {
        name: 'bulk of 100 creates',
        ours: { method: 'POST', url: `${records}/_bulk`, headers, body: bulkBody, expectStatus: 200 },
        baseline: { method: 'POST', url: `${servers.baseline}/bulk`, body: bulkBody, expectStatus: 200 },
        requests: Math.ceil(REQUESTS / 8),
        seconds: SECONDS,
      },
    ];
    type Page = { data: { total: number; items: { uuid: string }[] } };
    const [ourPage, basePage] = (await Promise.all(
      [fetch(`${records}?${list}&per_page=50`, { headers }), fetch(`${servers.baseline}/list?per_page=50`)].map(async (r) => (await r).json()),
    )) as [Page, Page];
    const ids = (p: Page) => JSON.stringify([p.data.total, p.data.items.map((i) => i.uuid)]);
    if (ids(ourPage) !== ids(basePage)) throw new Error('the API and the baseline disagree on the first page');
    console.log(
      `filter matches ${ourPage.data.total.toLocaleString('en')} of ${ROWS.toLocaleString('en')} records; ${cpus().length} CPUs; concurrency ${CONCURRENCY}`,
    );
    console.log(`baseline SQL:\n  ${servers.sql.pageSql}\n  ${servers.sql.countSql}`);
    const results = [];
    for (const scenario of scenarios) results.push({ name: scenario.name, ...(await measure(scenario)) });
    // Not a target: how much of the difference is authentication (two queries per request:
    // the failed-login guard and the application password lookup), which the bare route skips.
    const auth = await measure({
      name: 'auth',
      ours: { method: 'GET', url: `${servers.ours}/api/auth/v1/me`, headers, expectStatus: 200 },
      baseline: { method: 'GET', url: `${servers.baseline}/ping`, expectStatus: 200 },
      requests: REQUESTS,
      seconds: 1,
    });
    console.log(`\n${table(results)}`);
    report(
      results.flatMap((r) => [
        row('records list (1M rows)', `${r.name}: p50`, 'ms', r.baseline.p50, r.ours.p50, { max: 1.5 }),
        row('records list (1M rows)', `${r.name}: req/s`, 'req/s', r.baseline.rps, r.ours.rps, { min: 0.6 }),
      ]),
      false,
    );
    console.log(
      `\nauthentication alone (GET /api/auth/v1/me vs a bare constant route): p50 ${auth.ours.p50.toFixed(2)} ms vs ${auth.baseline.p50.toFixed(2)} ms`,
    );
    await mkdir(new URL('./results/', import.meta.url), { recursive: true });
    const file = new URL(`./results/records-list-${new Date().toISOString().replace(/[:.]/g, '-')}.json`, import.meta.url);
    await writeFile(file, JSON.stringify({ rows: ROWS, requests: REQUESTS, seconds: SECONDS, concurrency: CONCURRENCY, results, auth }, null, 2));
  } catch (err) {
    console.error('benchmark failed:', err);
    process.exitCode = 1;
  } finally {
    clearTimeout(watchdog);
    closeAgent();
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child!.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    for (const stop of stops.reverse()) await stop().catch((err) => console.error('cleanup:', err));
  }
}

if (process.argv.includes('--serve')) {
  const servers = await serve();
  const stop = () => void servers.stop().finally(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
} else {
  await main();
}
