/**
 * Weighs a setting by running the service with and without it side by side: each variant is a
 * service process of its own (as `npm start` runs it, on the same PostgreSQL and Temporal server),
 * all given the peer benchmark's webhook workflow (one http_request node, answered with its
 * output), measured in interleaved rounds: p50 at concurrency 1, requests/s and p99 at concurrency 50, and
 * the CPU per request of the service process, the Temporal server and PostgreSQL at each.
 *
 *   BENCH_VARIANTS  `name:ENV=value,ENV=value;name:...` (default `default:`, one variant as is);
 *                   NODE_FLAGS=<flags> among them starts that variant's node with those flags
 *                   (space-separated; V8's too, such as --single-threaded-gc, which NODE_OPTIONS refuses)
 *   BENCH_ROUNDS (4), BENCH_C1 (60 requests), BENCH_C50 (200 requests), BENCH_WARMUP (10 requests
 *   at concurrency 50 to each variant before the rounds; V8 is still optimising the service's
 *   code for the first thousand or so)
 *   BENCH_PAIRS (0): then that many requests to each variant one at a time, the variants taking
 *   turns request by request (the first of each turn alternating), reported as each variant's
 *   p50 and the median of its paired difference to the first variant, with how many turns it won:
 *   what rounds minutes apart cannot tell from the machine's drift.
 * Run: node --import tsx bench/levers.ts
 */
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../src/platform/logger.js';
import { benchSetup, cpuMs, oursApi, oursEnv, startOurs, webhookWorkflow } from './harness.js';
import { cleanups, load, median, round, runMain } from './lib.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const C1 = Number(process.env.BENCH_C1 ?? 60);
const C50 = Number(process.env.BENCH_C50 ?? 200);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 0);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 10);
const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');

const variants = (process.env.BENCH_VARIANTS ?? 'default:').split(';').map((v) => {
  const [name, settings = ''] = v.split(/:(.*)/s);
  const env = Object.fromEntries(
    settings
      .split(',')
      .filter(Boolean)
      .map((kv) => kv.split(/=(.*)/s) as [string, string]),
  );
  return { name: name!.trim(), env };
});

async function main() {
  const cleanup = cleanups();
  try {
    await bench(cleanup);
  } finally {
    await cleanup.run();
  }
}

async function bench(cleanup: ReturnType<typeof cleanups>) {
  const { env, target, dir, settings } = await benchSetup('levers', logger, cleanup);
  const sides = [];
  for (const [i, v] of variants.entries()) {
    const base = await oursEnv({ ...settings, queue: `bench-lever-${i}`, localPureNodes: true });
    // NODE_FLAGS: flags for node itself (V8's among them, which NODE_OPTIONS refuses), space-separated.
    const { NODE_FLAGS: flags = '', ...variantEnv } = v.env;
    const ours = await startOurs({ ...base, ...variantEnv }, join(dir, `lever-${i}.log`), flags.split(' ').filter(Boolean));
    cleanup.add(() => ours.stop());
    const hook = await webhookWorkflow(oursApi(ours).call, target.url);
    const call = async (n: number) => {
      const res = await fetch(`${ours.api}${hook.path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-webhook-secret': hook.secret },
        body: JSON.stringify({ n }),
      });
      if (res.status !== 200) throw new Error(`${v.name}: webhook answered ${res.status}: ${await res.text()}`);
    };
    await load(WARMUP, 50, call);
    sides.push({
      ...v,
      pid: ours.pid,
      call,
      figures: { p50: [] as number[], rps: [] as number[], p99: [] as number[], cpu1: [] as number[][], cpu50: [] as number[][] },
    });
  }
  const cpu = (pid: number) => [cpuMs(pid), env.pids.temporal ? cpuMs(env.pids.temporal) : NaN, env.pids.postgres ? cpuMs(env.pids.postgres) : NaN];
  const per = (a: number[], b: number[], n: number) => b.map((x, i) => (x - a[i]!) / n);
  const loads: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    loads.push(loadavg()[0]!);
    for (const s of r % 2 ? [...sides].reverse() : sides) {
      let before = cpu(s.pid);
      const c1 = await load(1, C1, s.call);
      s.figures.cpu1.push(per(before, cpu(s.pid), C1));
      s.figures.p50.push(c1.p50);
      before = cpu(s.pid);
      const c50 = await load(50, C50, s.call);
      const cpu50 = per(before, cpu(s.pid), C50);
      s.figures.cpu50.push(cpu50);
      s.figures.rps.push(c50.perSecond);
      s.figures.p99.push(c50.p99);
      process.stderr.write(
        `[levers] round ${r + 1} ${s.name}: p50 ${round(c1.p50)} ms, ${round(c50.perSecond)}/s, p99 at 50 ${round(c50.p99)} ms, process CPU a request at 50 ${round(cpu50[0]!)} ms\n`,
      );
    }
  }
  loads.push(loadavg()[0]!);
  const col = (rows: number[][], i: number) => round(median(rows.map((x) => x[i]!)));
  const lines = [
    `Load average ${loads.map(round).join(', ')}; medians of ${ROUNDS} rounds; CPU ms per request: process / Temporal / PostgreSQL.`,
    '',
    '| variant | p50 c1 ms | CPU c1 | req/s c50 | p99 c50 ms | CPU c50 | process memory MB: resident at the end, its peak |',
    '|---|---|---|---|---|---|---|',
    ...sides.map((s) => {
      const memory = memoryMb(s.pid);
      return `| ${s.name} | ${round(median(s.figures.p50))} | ${col(s.figures.cpu1, 0)} / ${col(s.figures.cpu1, 1)} / ${col(s.figures.cpu1, 2)} | ${round(median(s.figures.rps))} | ${round(median(s.figures.p99))} | ${col(s.figures.cpu50, 0)} / ${col(s.figures.cpu50, 1)} / ${col(s.figures.cpu50, 2)} | ${round(memory.rss)}, ${round(memory.peak)} |`;
    }),
  ];
  process.stdout.write(lines.join('\n') + '\n');
  if (PAIRS > 0) process.stdout.write('\n' + (await paired(sides)).join('\n') + '\n');
}

/** A process's resident memory now and at its peak (VmRSS and VmHWM of /proc/<pid>/status), MB. */
function memoryMb(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 };
}

/** Each variant's latency at concurrency 1, the variants taking turns request by request (see BENCH_PAIRS). */
async function paired(sides: { name: string; call: (n: number) => Promise<void> }[]): Promise<string[]> {
  const times = sides.map(() => [] as number[]);
  for (let i = 0; i < PAIRS; i++) {
    const order = sides.map((_, k) => k);
    if (i % 2) order.reverse();
    for (const k of order) {
      const started = performance.now();
      await sides[k]!.call(i);
      times[k]!.push(performance.now() - started);
    }
  }
  return [
    `${PAIRS} turns, one request to each variant a turn; ms at concurrency 1.`,
    '',
    `| variant | p50 | median of (it - ${sides[0]!.name}) | turns it was faster than ${sides[0]!.name} |`,
    '|---|---|---|---|',
    ...sides.map((s, k) => {
      const diffs = times[k]!.map((t, i) => t - times[0]![i]!);
      return `| ${s.name} | ${round(median(times[k]!))} | ${k ? round(median(diffs)) : '-'} | ${k ? `${diffs.filter((d) => d < 0).length} of ${PAIRS}` : '-'} |`;
    }),
  ];
}

runMain(main);
