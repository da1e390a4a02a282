/**
 * The service beside n8n, its closest alternative, and beside the bare Temporal SDK: the same
 * workflow on all of them (a webhook whose run makes one HTTP GET to a local target and answers
 * with what the target said), on the same machine, measured in interleaved rounds:
 *
 *  - n8n 1.123.81 as its peer scripts run it (bench/n8n-peer.ts: regular mode, SQLite, executions
 *    saved as by default): W1, `POST /webhook/bench`, Webhook -> HTTP Request -> respond;
 *  - the service's embedded default as `npm start` runs it (API and worker in one process, the
 *    file-backed Temporal dev server, embedded PostgreSQL, durability on): a webhook trigger with
 *    `respond: "last_node"` and one `http_request` node;
 *  - the bare SDK (bench/bare.ts) behind a minimal HTTP server: each POST runs a hand-written
 *    workflow of one activity doing the GET (`client.workflow.execute()`, eager start), once with a
 *    regular activity and once with a local one; no codec, no record, no authentication.
 *
 * Each round runs, for each concurrency (1, 10, 50), each party in turn (the order rotates from
 * round to round), so all meet the same machine: p50 and p99 at concurrency 1, requests/s and p50
 * at 10 and 50, p99 at 50, and the CPU of every process per request (from /proc: ours, Temporal,
 * PostgreSQL; n8n and its task runner; the bare SDK's process and Temporal). Figures are the
 * medians of the rounds. Then n8n's W2 (one run making 1,000 HTTP calls) through its bench.mjs, and
 * the same with a `for_each` node when the service has one (forEachWorkflow below).
 *
 * After the rounds, the parties take turns request by request (BENCH_PEER_TURNS turns, one
 * request each a turn): each party's p50 over the same minutes, and ours beside each turn by turn
 * (the median of the differences, the turns ours was the faster), which the machine's drift
 * between rounds does not move. It is another figure than p50 at concurrency 1: each request
 * arrives alone, the others' requests in between, so what a party does after it has answered
 * (ours: the run's last workflow task and its close) is done before its next request. It is the
 * latency of a webhook that arrives on its own, reported beside the goal's back-to-back figure.
 *
 * Knobs: BENCH_ROUNDS (3), BENCH_PEER_C1 (100 requests), BENCH_PEER_C10 (200), BENCH_PEER_C50
 * (300), BENCH_PEER_TURNS (200; 0 leaves them out), BENCH_PEER_PARTIES (n8n,bare,bare-local,ours),
 * BENCH_PEER_W2_RUNS (3), BENCH_PEER_WARMUP (0: requests at concurrency 50 to each party before the
 * rounds, in turns of 500, each turn's requests/s and CPU a request in the report; 5,000 brings
 * every party here to the cost it keeps, a fresh process's JavaScript being compiled meanwhile).
 * Run: npm run bench -- peer   (writes bench/results/peer.md and its section of latest.md)
 */
import { rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { Agent, request } from 'node:http';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { generateMasterKey } from '../src/platform/crypto.js';
import { createLogger } from '../src/platform/logger.js';
import { bundleWorkflows } from '../src/temporal/worker.js';
import { nodeTypes } from '../src/nodes/index.js';
import { cpuMs, oursApi, oursEnv, ownCpuMs, startBare, startOurs, startTarget, webhookWorkflow } from './harness.js';
import { cleanups, median, percentile, report, round, row, runMain, scratchDir, section, type BenchRow } from './lib.js';
import { PEER_TARGET, startN8nPeer, type N8nPeer } from './n8n-peer.js';
import { benchServers } from './servers.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const COUNTS: Record<number, number> = {
  1: Number(process.env.BENCH_PEER_C1 ?? 100),
  10: Number(process.env.BENCH_PEER_C10 ?? 200),
  50: Number(process.env.BENCH_PEER_C50 ?? 300),
};
const LEVELS = [1, 10, 50];
const W2_RUNS = Number(process.env.BENCH_PEER_W2_RUNS ?? 3);
const WARMUP = Number(process.env.BENCH_PEER_WARMUP ?? 0);
const WARMUP_STEP = 500;
const TURNS = Number(process.env.BENCH_PEER_TURNS ?? 200);
const WANTED = (process.env.BENCH_PEER_PARTIES ?? 'n8n,bare,bare-local,ours').split(',').map((s) => s.trim());
const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');
const say = (line: string) => process.stderr.write(`[peer] ${line}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- CPU of one process

/** A process whose CPU a party's requests cost. */
interface Proc {
  name: string;
  read(): number;
}
const whole = (name: string, pid: number): Proc => ({ name, read: () => cpuMs(pid) });

// ---------------------------------------------------------------- the client

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

interface Answer {
  status: number;
  body: string;
  ms: number;
}

function post(url: string, headers: Record<string, string>, payload: unknown): Promise<Answer> {
  const body = Buffer.from(JSON.stringify(payload));
  const started = performance.now();
  return new Promise((resolve) => {
    const req = request(
      url,
      { method: 'POST', agent, headers: { ...headers, 'content-type': 'application/json', 'content-length': String(body.length) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), ms: performance.now() - started }));
        res.on('error', (e) => resolve({ status: 0, body: String(e), ms: performance.now() - started }));
      },
    );
    req.setTimeout(120_000, () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ status: 0, body: String(e), ms: performance.now() - started }));
    req.end(body);
  });
}

interface Party {
  name: string;
  /** How it is labelled in the tables. */
  label: string;
  url: string;
  headers: Record<string, string>;
  /** The answer is the target's `{"ok": true}`, in the party's own envelope. */
  ok(a: Answer): boolean;
  procs: Proc[];
}

interface Measured {
  p50: number;
  p99: number;
  rps: number;
  errors: number;
  firstError?: string;
  /** CPU ms per request, by process name. */
  cpu: Record<string, number>;
  load: number;
}

/** `total` requests, `concurrency` at a time; latencies of the good ones, the CPU each process spent per request. */
/** The CPU a request of all of a party's processes together. */
const allCpu = (m: Measured) => Object.values(m.cpu).reduce((a, b) => a + b, 0);

async function measure(party: Party, concurrency: number, total: number): Promise<Measured> {
  const before = party.procs.map((p) => p.read());
  const latencies: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(concurrency, total) }, async () => {
      while (next < total) {
        const i = next++;
        const a = await post(party.url, party.headers, { i });
        if (party.ok(a)) latencies.push(a.ms);
        else {
          errors++;
          firstError ??= `${a.status} ${a.body.slice(0, 300)}`;
        }
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const after = party.procs.map((p) => p.read());
  const cpu = Object.fromEntries(party.procs.map((p, i) => [p.name, (after[i]! - before[i]!) / total]));
  return {
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    rps: latencies.length / seconds,
    errors,
    ...(firstError ? { firstError } : {}),
    cpu,
    load: loadavg()[0]!,
  };
}

// ---------------------------------------------------------------- W2 with for_each

/**
 * n8n's W2 done by the service: a webhook run that makes 1,000 HTTP calls, one per item, and
 * answers their count. Needs the `for_each` node; undefined (and W2 is measured for n8n only)
 * while the node catalogue has none.
 */
async function forEachWorkflow(call: ReturnType<typeof oursApi>['call'], connectionId: number): Promise<{ slug: string; secret: string } | undefined> {
  if (!nodeTypes.has('for_each')) return undefined;
  const hook = (await call('POST', '/api/workflow/v1/workflows', {
    title: 'Peer W2',
    status: 'active',
    trigger: { type: 'webhook', config: { respond: 'last_node' } },
    nodes: [
      { id: 'items', type: 'transform', config: { value: '{{ [1..1000] }}' } },
      {
        id: 'loop',
        type: 'for_each',
        config: {
          items: '{{ nodes.items }}',
          body: { nodes: [{ id: 'get', type: 'http_request', connection_id: connectionId, config: { method: 'GET', path: '/' } }] },
        },
      },
      { id: 'count', type: 'transform', config: { value: { count: '{{ nodes.loop.succeeded }}' } } },
    ],
    edges: [
      { from: 'items', to: 'loop' },
      { from: 'loop', to: 'count' },
    ],
  })) as { slug: string; webhook: { secret: string } };
  return { slug: hook.slug, secret: hook.webhook.secret };
}

// ---------------------------------------------------------------- the benchmark

async function main() {
  const cleanup = cleanups();
  try {
    await bench(cleanup);
  } finally {
    await cleanup.run();
    agent.destroy();
  }
}

async function bench(cleanup: ReturnType<typeof cleanups>) {
  const loadBefore = loadavg()[0]!;
  const dir = scratchDir('svc-bench-peer-');
  cleanup.add(() => rmSync(dir, { recursive: true, force: true }));

  // n8n first: its scripts also start the target every party calls.
  let n8n: N8nPeer | undefined;
  let skipped: string | undefined;
  if (WANTED.includes('n8n')) {
    const started = await startN8nPeer(dir, say);
    if ('skipped' in started) {
      skipped = started.skipped;
      process.stdout.write(`n8n peer skipped: ${skipped}\n`);
    } else {
      n8n = started;
      cleanup.add(() => started.stop());
    }
  }
  let target = PEER_TARGET;
  if (
    !(await fetch(`${PEER_TARGET}/`).then(
      (r) => r.ok,
      () => false,
    ))
  ) {
    const own = await startTarget();
    cleanup.add(() => own.close());
    target = own.url;
  }

  const env = await benchServers('peer', logger);
  cleanup.add(() => env.stop());
  const bundlePath = join(dir, 'bundle.js');
  await writeFile(bundlePath, (await bundleWorkflows()).code);
  const settings = { databaseUrl: env.databaseUrl, temporalAddress: env.temporalAddress, key: generateMasterKey(), bundlePath, dir, targetUrl: target };
  const ours = await startOurs(await oursEnv({ ...settings, queue: 'bench-peer', localPureNodes: true }), join(dir, 'ours.log'));
  cleanup.add(() => ours.stop());
  const bare = await startBare(env.temporalAddress, 'bench-peer-bare');
  cleanup.add(() => bare.stop());
  const serve = async (local: boolean) => (await bare.run({ type: 'bareHook', args: [`${target}/`, local], total: 0, concurrency: 0, serve: true })).url!;

  const { call } = oursApi(ours);
  const hook = await webhookWorkflow(call, target);

  const temporal = env.pids.temporal ? [whole('Temporal', env.pids.temporal)] : [];
  const postgres = env.pids.postgres ? [whole('PostgreSQL', env.pids.postgres)] : [];
  const targetOk = (body: unknown) => (body as { ok?: unknown } | null)?.ok === true;
  const parse = (a: Answer) => {
    try {
      return JSON.parse(a.body) as unknown;
    } catch {
      return undefined;
    }
  };
  const all: Party[] = [
    ...(n8n
      ? [
          {
            name: 'n8n',
            label: `n8n ${n8n.version}`,
            url: n8n.w1,
            headers: {},
            ok: (a: Answer) => a.status === 200 && targetOk(parse(a)),
            procs: [
              { name: 'n8n', read: () => ownCpuMs(n8n.pid) },
              { name: 'n8n task runner', read: () => cpuMs(n8n.pid) - ownCpuMs(n8n.pid) },
            ],
          },
        ]
      : []),
    ...(WANTED.includes('bare')
      ? [
          {
            name: 'bare',
            label: 'bare SDK, regular activity',
            url: await serve(false),
            headers: {},
            ok: (a: Answer) => a.status === 200 && targetOk(parse(a)),
            procs: [whole('process', bare.pid), ...temporal],
          },
        ]
      : []),
    ...(WANTED.includes('bare-local')
      ? [
          {
            name: 'bare-local',
            label: 'bare SDK, local activity',
            url: await serve(true),
            headers: {},
            ok: (a: Answer) => a.status === 200 && targetOk(parse(a)),
            procs: [whole('process', bare.pid), ...temporal],
          },
        ]
      : []),
    ...(WANTED.includes('ours')
      ? [
          {
            name: 'ours',
            label: 'this service (embedded default)',
            url: `${ours.api}${hook.path}`,
            headers: { 'x-webhook-secret': hook.secret },
            ok: (a: Answer) => a.status === 200 && targetOk((parse(a) as { data?: { output?: { body?: unknown } } })?.data?.output?.body),
            procs: [whole('process', ours.pid), ...temporal, ...postgres],
          },
        ]
      : []),
  ];

  // Warm-up: every party answers, and has its caches and connections up.
  for (const p of all) {
    const w = await measure(p, 5, 30);
    if (w.errors) throw new Error(`${p.label} does not answer as expected: ${w.firstError}`);
  }
  // Then, with BENCH_PEER_WARMUP, each party in turn until its JavaScript has been compiled as
  // far as V8 will take it (a fresh process spends several times the CPU a request for its first
  // thousand or so): what it costs at a window of each WARMUP_STEP requests is kept for the report.
  const warmups = new Map<string, Measured[]>(all.map((p) => [p.name, []]));
  for (let done = 0; done < WARMUP; done += WARMUP_STEP) {
    const step = Math.min(WARMUP_STEP, WARMUP - done);
    for (const p of all) {
      const w = await measure(p, 50, step);
      warmups.get(p.name)!.push(w);
      say(`warm-up ${done + step} ${p.name}: ${round(w.rps)}/s, CPU ${round(allCpu(w))} ms a request`);
    }
  }

  const results = new Map<string, Map<number, Measured[]>>(all.map((p) => [p.name, new Map(LEVELS.map((c) => [c, []]))]));
  const loads: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    loads.push(loadavg()[0]!);
    for (const c of LEVELS) {
      const order = all.map((_, i) => all[(i + r) % all.length]!);
      for (const p of order) {
        await sleep(500);
        const m = await measure(p, c, COUNTS[c]!);
        results.get(p.name)!.get(c)!.push(m);
        say(
          `round ${r + 1} c${c} ${p.name}: p50 ${round(m.p50)} ms, p99 ${round(m.p99)} ms, ${round(m.rps)}/s, load ${round(m.load)}${m.errors ? `, ${m.errors} errors: ${m.firstError}` : ''}`,
        );
      }
    }
  }
  // Request by request: the parties take turns, one request each (who goes first rotating), so
  // that whatever the machine does in those minutes falls on all of them alike; rounds minutes
  // apart see it move between them. NaN marks a request that did not answer as expected.
  const turns = new Map<string, number[]>(all.map((p) => [p.name, []]));
  for (let t = 0; t < TURNS; t++) {
    for (let i = 0; i < all.length; i++) {
      const p = all[(i + t) % all.length]!;
      const a = await post(p.url, p.headers, { turn: t });
      turns.get(p.name)!.push(p.ok(a) ? a.ms : NaN);
    }
  }
  loads.push(loadavg()[0]!);
  const answered = (name: string) => (turns.get(name) ?? []).filter(Number.isFinite);
  /** Ours beside `base`, turn by turn: the median of ours minus theirs, and the turns ours was the faster. */
  const paired = (base: string) => {
    const theirs = turns.get(base) ?? [];
    const diffs = (turns.get('ours') ?? []).map((ms, t) => ms - theirs[t]!).filter(Number.isFinite);
    return { median: median(diffs), faster: diffs.filter((d) => d < 0).length, of: diffs.length };
  };

  // W2: n8n's 1,000 calls in one run (its bench.mjs), and ours with for_each when there is one.
  const w2: string[] = [];
  if (n8n) {
    const procs = all.find((p) => p.name === 'n8n')!.procs;
    const before = procs.map((p) => p.read());
    const out = await n8n.bench({ BENCH_WARMUP: '0', BENCH_N_SEQ: '0', BENCH_N_CONC: '0', BENCH_N_W2: String(W2_RUNS) });
    const cpu = procs.map((p, i) => `${p.name} ${round((p.read() - before[i]!) / (W2_RUNS * 1000))} ms`).join(', ');
    const res = out.w2 as { items_per_s: number; run_ms: number[]; errors: number };
    w2.push(`| n8n ${n8n.version} | ${res.items_per_s} | ${res.run_ms.join(', ')} | ${res.errors} | ${cpu} |`);
  }
  const loop = await forEachWorkflow(call, hook.connectionId);
  if (loop) {
    const party = all.find((p) => p.name === 'ours')!;
    const before = party.procs.map((p) => p.read());
    const runs: number[] = [];
    let errors = 0;
    for (let i = 0; i < W2_RUNS; i++) {
      const a = await post(`${ours.api}/api/workflow/v1/hooks/${loop.slug}`, { 'x-webhook-secret': loop.secret }, { run: i });
      const count = (parse(a) as { data?: { output?: { count?: number } } })?.data?.output?.count;
      if (a.status === 200 && count === 1000) runs.push(a.ms);
      else errors++;
    }
    const wall = runs.reduce((a, b) => a + b, 0) / 1000;
    const cpu = party.procs.map((p, i) => `${p.name} ${round((p.read() - before[i]!) / (W2_RUNS * 1000))} ms`).join(', ');
    w2.push(
      `| this service, for_each (concurrency 10) | ${round((runs.length * 1000) / wall)} | ${runs.map((x) => Math.round(x)).join(', ')} | ${errors} | ${cpu} |`,
    );
  } else {
    w2.push('| this service | – | – | – | no `for_each` node in this build: W2 is measured for n8n only |');
  }

  // ---------------------------------------------------------------- the tables

  const fig = (name: string, c: number, f: (m: Measured) => number) => median(results.get(name)?.get(c)?.map(f) ?? []);
  const spread = (name: string, c: number, f: (m: Measured) => number) => {
    const v = results.get(name)?.get(c)?.map(f) ?? [];
    return v.length ? `${round(Math.min(...v))}–${round(Math.max(...v))}` : '–';
  };
  const cpuOf = (name: string, c: number, proc?: string) => fig(name, c, (m) => (proc ? (m.cpu[proc] ?? NaN) : allCpu(m)));
  const has = (name: string) => results.has(name);

  const rows: BenchRow[] = [];
  const versus = (baseName: string, bench: string, targets: { p50c1?: number; rpsc50?: number; cpuProcess?: number; cpuAll?: number }) => {
    if (!has(baseName) || !has('ours')) return;
    const pair = (metric: string, unit: string, f: (n: string) => number, target: { max?: number; min?: number }) =>
      rows.push(row(bench, metric, unit, f(baseName), f('ours'), target));
    pair('p50 latency, concurrency 1', 'ms', (n) => fig(n, 1, (m) => m.p50), targets.p50c1 ? { max: targets.p50c1 } : {});
    pair('p99 latency, concurrency 1', 'ms', (n) => fig(n, 1, (m) => m.p99), {});
    if (TURNS > 0) pair(`p50 latency of a request arriving alone (the parties taking turns, ${TURNS} turns)`, 'ms', (n) => median(answered(n)), {});
    pair('requests/s, concurrency 10', 'req/s', (n) => fig(n, 10, (m) => m.rps), {});
    pair('p50 latency, concurrency 10', 'ms', (n) => fig(n, 10, (m) => m.p50), {});
    pair('requests/s, concurrency 50', 'req/s', (n) => fig(n, 50, (m) => m.rps), targets.rpsc50 ? { min: targets.rpsc50 } : {});
    pair('p50 latency, concurrency 50', 'ms', (n) => fig(n, 50, (m) => m.p50), {});
    pair('p99 latency, concurrency 50', 'ms', (n) => fig(n, 50, (m) => m.p99), {});
    const mainProc = (n: string) => (n === 'n8n' ? 'n8n' : 'process');
    pair('CPU ms per request at concurrency 50: the service process (n8n: its main process)', 'ms', (n) => cpuOf(n, 50, mainProc(n)), {});
    pair('CPU ms per request at concurrency 50: every process (n8n and its task runner; ours: + Temporal + PostgreSQL)', 'ms', (n) => cpuOf(n, 50), {});
  };
  versus('n8n', 'webhook -> HTTP GET -> respond: ours vs n8n', { p50c1: 1, rpsc50: 1 });
  versus('bare', 'webhook -> HTTP GET -> respond: ours vs the bare SDK (regular activity)', {});
  versus('bare-local', 'webhook -> HTTP GET -> respond: ours vs the bare SDK (local activity)', {});
  report(rows);

  const parties = all.map((p) => p.name);
  const detail = [
    `Load average (1 min) at the start of each round and at the end: ${loads.map((l) => round(l)).join(', ')} (before the benchmark: ${round(loadBefore)}).${skipped ? ` The n8n peer was skipped: ${skipped}.` : ''}`,
    '',
    'Each figure is the median of the rounds, with the range over the rounds in brackets; CPU is ms per request, from /proc.',
    '',
    ...(TURNS > 0 && has('ours')
      ? [
          `Requests arriving alone, the parties taking turns request by request (${TURNS} turns, who goes first rotating; what a party does after answering is done before its next request): p50 ${all
            .map((p) => `${p.label} ${round(median(answered(p.name)))} ms`)
            .join(', ')}. Ours turn by turn: ${all
            .filter((p) => p.name !== 'ours')
            .map((p) => {
              const d = paired(p.name);
              return `beside ${p.label} a median difference of ${round(d.median)} ms, the faster in ${d.faster} of ${d.of} turns`;
            })
            .join('; ')}.`,
          '',
        ]
      : []),
    ...(WARMUP > 0
      ? [
          `Before the rounds each party answered ${WARMUP} requests at concurrency 50, the parties taking turns ${WARMUP_STEP} at a time; requests/s and the CPU of all its processes a request, turn by turn:`,
          '',
          `| | ${all.map((p) => p.label).join(' | ')} |`,
          `|---|${all.map(() => '---').join('|')}|`,
          ...(warmups.get(all[0]!.name) ?? []).map(
            (_, i) =>
              `| requests ${i * WARMUP_STEP + 1} to ${Math.min((i + 1) * WARMUP_STEP, WARMUP)} | ${all
                .map((p) => {
                  const w = warmups.get(p.name)![i]!;
                  return `${round(w.rps)}/s, ${round(allCpu(w))} ms`;
                })
                .join(' | ')} |`,
          ),
          '',
        ]
      : []),
    `| | ${all.map((p) => p.label).join(' | ')} |`,
    `|---|${all.map(() => '---').join('|')}|`,
    ...LEVELS.flatMap((c) => [
      `| p50 ms, concurrency ${c} (${COUNTS[c]} requests) | ${parties.map((n) => `${round(fig(n, c, (m) => m.p50))} [${spread(n, c, (m) => m.p50)}]`).join(' | ')} |`,
      ...(c === 10
        ? []
        : [`| p99 ms, concurrency ${c} | ${parties.map((n) => `${round(fig(n, c, (m) => m.p99))} [${spread(n, c, (m) => m.p99)}]`).join(' | ')} |`]),
      `| requests/s, concurrency ${c} | ${parties.map((n) => `${round(fig(n, c, (m) => m.rps))} [${spread(n, c, (m) => m.rps)}]`).join(' | ')} |`,
      `| CPU ms per request, concurrency ${c} | ${all
        .map((p) => p.procs.map((proc) => `${proc.name} ${round(cpuOf(p.name, c, proc.name))}`).join(', ') + `; all ${round(cpuOf(p.name, c))}`)
        .join(' | ')} |`,
      `| errors, concurrency ${c} | ${parties.map((n) => String((results.get(n)?.get(c) ?? []).reduce((a, m) => a + m.errors, 0))).join(' | ')} |`,
    ]),
    '',
    `W2: one run making 1,000 HTTP GETs to the target (n8n: a Code node makes 1,000 items, the HTTP Request node calls once per item; ${W2_RUNS} runs one after the other):`,
    '',
    '| | items/s | run ms | errors | CPU ms per item |',
    '|---|---|---|---|---|',
    ...w2,
  ].join('\n');
  section('peer', detail);
  process.stdout.write(`\n${detail}\n`);
}

runMain(main);
