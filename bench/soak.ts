/**
 * Sustained mixed load (`npm run soak`): records lists, licence verifications and workflow runs
 * against one service (API and worker in this process, as `svc start` runs them) for a bounded
 * time, on loopback. The load comes from a child process, so the service's heap is measured alone
 * and the load generator's own work does not block the service's event loop.
 *
 * After a warm-up, it measures SOAK_WINDOWS (3) consecutive windows of SOAK_WINDOW_SECONDS (60)
 * each and reports, per window and per kind of request, the count, the error count, p50 and p99,
 * and the service's heap after a full garbage collection. It fails when:
 *  - any request answered other than 2xx (error rate must be 0);
 *  - the heap grew across the windows (last minus first over max(8 MiB, 10%)), i.e. a leak;
 *  - a workflow run it started did not finish successfully.
 * The table goes to stdout and to bench/results/soak.md.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { fork } from 'node:child_process';
import { writeHeapSnapshot } from 'node:v8';
import { loadConfig } from '../src/config.js';
import { generateMasterKey } from '../src/platform/crypto.js';
import { createLogger } from '../src/platform/logger.js';
import { startStack } from '../src/stack.js';
import { apiCaller, basicAuth, percentile, runMain } from './lib.js';
import { benchServers } from './servers.js';

const WINDOW_SECONDS = Number(process.env.SOAK_WINDOW_SECONDS ?? 60);
const WINDOWS = Number(process.env.SOAK_WINDOWS ?? 3);
const WARMUP_SECONDS = Number(process.env.SOAK_WARMUP_SECONDS ?? 20);
const CONCURRENCY = Number(process.env.SOAK_CONCURRENCY ?? 8);
const RECORDS = 5_000;
const MiB = 1024 * 1024;

type Kind = 'records list' | 'licence verify' | 'workflow run';
interface Sample {
  kind: Kind;
  ms: number;
  status: number;
}
interface LoadPlan {
  api: string;
  auth: string;
  licenceKey: string;
  site: { site_url: string; site_fingerprint: string };
  workflowId: number;
  concurrency: number;
}

/** The load generator (child process): runs until told to stop, sending its samples in batches. */
async function generate(plan: LoadPlan): Promise<void> {
  let running = true;
  const send = (m: unknown) => process.send!(m);
  process.on('message', (m) => {
    if (m === 'stop') running = false;
  });
  const headers = { authorization: plan.auth, 'content-type': 'application/json' };
  const requests: Record<Kind, () => Promise<Response>> = {
    'records list': () =>
      fetch(`${plan.api}/api/management/v1/records/contact?eql=${encodeURIComponent('age >= 30 and stage = "customer"')}&sort=seen_at:desc&per_page=50`, {
        headers,
      }),
    'licence verify': () =>
      fetch(`${plan.api}/api/portal/v1/licenses/${encodeURIComponent(plan.licenceKey)}/verify`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ site_fingerprint: plan.site.site_fingerprint }).toString(),
      }),
    'workflow run': () =>
      fetch(`${plan.api}/api/workflow/v1/workflows/${plan.workflowId}/run`, { method: 'POST', headers, body: JSON.stringify({ payload: { at: Date.now() } }) }),
  };
  // Nine reads to one run: lists and verifications as a busy site sends them, runs steadily.
  const mix: Kind[] = [
    'records list',
    'licence verify',
    'records list',
    'licence verify',
    'records list',
    'licence verify',
    'records list',
    'licence verify',
    'records list',
    'workflow run',
  ];
  let batch: Sample[] = [];
  const flush = setInterval(() => {
    if (batch.length) send(batch);
    batch = [];
  }, 250);
  let i = 0;
  await Promise.all(
    Array.from({ length: plan.concurrency }, async () => {
      while (running) {
        const kind = mix[i++ % mix.length]!;
        const started = performance.now();
        let status = 0;
        try {
          const res = await requests[kind]();
          await res.arrayBuffer();
          status = res.status;
        } catch {
          status = 0;
        }
        batch.push({ kind, ms: performance.now() - started, status });
      }
    }),
  );
  clearInterval(flush);
  send(batch);
  send('done');
  process.disconnect();
}

function heapAfterGc(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc (npm run soak does)');
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

async function main(): Promise<void> {
  const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');
  const env = await benchServers('soak', logger);
  const appPassword = 'soak-app-password-0123456789';
  const config = loadConfig({
    DATABASE_URL: env.databaseUrl,
    TEMPORAL_ADDRESS: env.temporalAddress,
    TEMPORAL_TASK_QUEUE: `soak-${Date.now()}`,
    SVC_INSTANCE_ID: `soak${Date.now()}`,
    SVC_ENCRYPTION_KEY: generateMasterKey(),
    SVC_ADMIN_APP_PASSWORD: appPassword,
    // Every verification is still counted against the limit; the limit itself is out of reach,
    // because all load comes from one address.
    SVC_LICENSE_RATE_LIMIT: '100000000',
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'warn',
  });
  const stack = await startStack(config, logger, { embedded: false, roles: { api: true, worker: true } });
  const api = stack.urls.api!;
  const auth = basicAuth('admin', appPassword);
  const call = apiCaller(api, auth);
  try {
    await call('POST', '/api/management/v1/entities', {
      slug: 'contact',
      name: 'Contact',
      schema: {
        fields: {
          email: { type: 'string', required: true, unique: true },
          age: { type: 'integer' },
          stage: { type: 'enum', values: ['lead', 'customer'] },
          seen_at: { type: 'datetime' },
        },
      },
    });
    for (let start = 0; start < RECORDS; start += 100) {
      await call(
        'POST',
        '/api/management/v1/records/contact/_bulk',
        Array.from({ length: 100 }, (_, k) => {
          const n = start + k;
          return {
            op: 'create',
            fields: {
              email: `c${n}@soak.test`,
              age: n % 80,
              stage: n % 3 ? 'lead' : 'customer',
              seen_at: new Date(Date.UTC(2024, 0, 1) + n * 60_000).toISOString(),
            },
          };
        }),
      );
    }
    const licence = await call('POST', '/api/management/v1/licenses', { product_slug: 'soak', product_name: 'Soak', domain_limit: 2 });
    const site = { site_url: 'https://soak.example.com', site_fingerprint: 'f'.repeat(64) };
    const activated = await fetch(`${api}/api/portal/v1/licenses/${encodeURIComponent(licence.token)}/activate`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(site).toString(),
    });
    if (activated.status !== 200) throw new Error(`activation failed: ${activated.status} ${await activated.text()}`);
    const workflow = await call('POST', '/api/workflow/v1/workflows', {
      title: 'Soak',
      trigger: { type: 'manual' },
      nodes: [
        { id: 'shape', type: 'transform', config: { value: { at: '{{ trigger.at }}' } } },
        { id: 'check', type: 'condition', config: { expression: '{{ nodes.shape.at > 0 }}' } },
      ],
      edges: [{ from: 'shape', to: 'check' }],
    });

    const plan: LoadPlan = { api, auth, licenceKey: licence.token, site, workflowId: workflow.id, concurrency: CONCURRENCY };
    const loader = fork(fileURLToPath(import.meta.url), ['--load', JSON.stringify(plan)], { execArgv: ['--import', 'tsx'] });
    let current: Sample[] = [];
    const finished = new Promise<void>((resolve, reject) => {
      loader.on('message', (m) => (m === 'done' ? resolve() : current.push(...(m as Sample[]))));
      loader.on('error', reject);
      loader.on('exit', (code) => (code ? reject(new Error(`the load generator exited with ${code}`)) : resolve()));
    });
    const sleep = (s: number) => new Promise((r) => setTimeout(r, s * 1000));
    process.stderr.write(`soak: warming up for ${WARMUP_SECONDS} s, then ${WINDOWS} windows of ${WINDOW_SECONDS} s at concurrency ${CONCURRENCY}\n`);
    await sleep(WARMUP_SECONDS);
    current = [];
    const baseHeap = heapAfterGc();
    const kinds: Kind[] = ['records list', 'licence verify', 'workflow run'];
    interface KindStats {
      count: number;
      errors: number;
      p50: number;
      p99: number;
    }
    // Each window's samples are reduced to figures before the heap is measured, so the
    // measurement holds none of them.
    const summarise = (samples: Sample[]) =>
      Object.fromEntries(
        kinds.map((kind) => {
          const of = samples.filter((x) => x.kind === kind);
          const ms = of.map((x) => x.ms);
          return [
            kind,
            { count: of.length, errors: of.filter((x) => x.status < 200 || x.status >= 300).length, p50: percentile(ms, 50), p99: percentile(ms, 99) },
          ];
        }),
      ) as Record<Kind, KindStats>;
    const windows: { stats: Record<Kind, KindStats>; heap: number; rss: number }[] = [];
    for (let w = 0; w < WINDOWS; w++) {
      await sleep(WINDOW_SECONDS);
      const stats = summarise(current);
      current = [];
      windows.push({ stats, heap: heapAfterGc(), rss: process.memoryUsage().rss });
      // SOAK_HEAP_SNAPSHOTS=<dir>: a heap snapshot after each window, to compare when the heap grows.
      if (process.env.SOAK_HEAP_SNAPSHOTS) writeHeapSnapshot(join(process.env.SOAK_HEAP_SNAPSHOTS, `window-${w + 1}.heapsnapshot`));
      const requests = kinds.reduce((n, k) => n + stats[k].count, 0);
      process.stderr.write(`soak: window ${w + 1}: ${requests} requests, heap ${(windows.at(-1)!.heap / MiB).toFixed(1)} MiB\n`);
    }
    loader.send('stop');
    await finished;

    // Every run the load started must finish, successfully.
    const deadline = Date.now() + 120_000;
    let counts: { status: string; n: string }[] = [];
    while (Date.now() < deadline) {
      counts = await stack.services.sql.query<{ status: string; n: string }>(
        'select status, count(*) as n from executions where workflow_id = ? group by status',
        [workflow.id],
      );
      if (!counts.some((c) => c.status === 'running')) break;
      await sleep(1);
    }

    const lines = [
      '# Sustained mixed load',
      '',
      `Run on ${new Date().toISOString()} (${process.platform}/${process.arch}, Node ${process.version}): ${WINDOWS} windows of ${WINDOW_SECONDS} s after ${WARMUP_SECONDS} s of warm-up, ${CONCURRENCY} requests in flight, nine reads to one run; ${RECORDS} records, one licence on one domain. API and worker in one process; heap measured after a full GC (it was ${(baseHeap / MiB).toFixed(1)} MiB after the warm-up).`,
      '',
      '| window | kind | requests | req/s | errors | p50 ms | p99 ms | heap after GC MiB | RSS MiB |',
      '|---|---|---|---|---|---|---|---|---|',
    ];
    let errors = 0;
    let total = 0;
    windows.forEach((w, index) => {
      for (const kind of kinds) {
        const k = w.stats[kind];
        errors += k.errors;
        total += k.count;
        lines.push(
          `| ${index + 1} | ${kind} | ${k.count} | ${(k.count / WINDOW_SECONDS).toFixed(1)} | ${k.errors} | ${k.p50.toFixed(1)} | ${k.p99.toFixed(1)} | ${(w.heap / MiB).toFixed(1)} | ${(w.rss / MiB).toFixed(0)} |`,
        );
      }
    });
    const first = windows[0]!.heap;
    const last = windows.at(-1)!.heap;
    const growth = last - first;
    const allowed = Math.max(8 * MiB, first * 0.1);
    const runs = Object.fromEntries(counts.map((c) => [c.status, Number(c.n)]));
    const problems: string[] = [];
    if (errors) problems.push(`${errors} requests answered other than 2xx`);
    if (growth > allowed)
      problems.push(`heap grew ${(growth / MiB).toFixed(1)} MiB from window 1 to window ${WINDOWS} (allowed ${(allowed / MiB).toFixed(1)} MiB)`);
    if (Object.keys(runs).some((s) => s !== 'success')) problems.push(`runs not all successful: ${JSON.stringify(runs)}`);
    lines.push(
      '',
      `Error rate: ${errors} of ${total}. Heap from window 1 to ${WINDOWS}: ${growth >= 0 ? '+' : ''}${(growth / MiB).toFixed(1)} MiB (a leak is over ${(allowed / MiB).toFixed(1)} MiB). Runs: ${JSON.stringify(runs)}.`,
      problems.length ? `\nPROBLEMS: ${problems.join('; ')}` : '\nResult: no errors, heap flat, every run finished.',
      '',
    );
    const text = lines.join('\n');
    process.stdout.write(text);
    const dir = fileURLToPath(new URL('results', import.meta.url));
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'soak.md'), text);
    if (problems.length) throw new Error('sustained load found problems');
  } finally {
    await stack.stop();
    await env.stop();
  }
}

if (process.argv[2] === '--load') void generate(JSON.parse(process.argv[3]!) as LoadPlan);
else runMain(main);
