import { appendFileSync, chmodSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** One line of the benchmark table: ours against a baseline run side by side. */
export interface BenchRow {
  benchmark: string;
  metric: string;
  baseline: number;
  ours: number;
  unit: string;
  /** `ours / baseline`, compared with the target. */
  ratio: number;
  target: string;
  /** An absolute goal on `ours` on a 2-core machine running everything, beside the ratio target. */
  goal?: string;
  pass: boolean;
  /** Set when the target is a difference, not a ratio: the ratio column then shows `ours - baseline` in this unit. */
  addedUnit?: string;
  /** For per-step times: ours as a multiple of the limit row (the bare SDK's local-activity step). */
  perLimit?: number;
  /** The limit row itself: what the server can do, no code of ours. */
  limit?: boolean;
  /** A secondary figure: shown in the details table below the main one. */
  detail?: boolean;
}

type Bound = { max?: number; min?: number };
const boundText = (b: Bound, suffix: string) => (b.max !== undefined ? `<= ${b.max}${suffix}` : `>= ${b.min}${suffix}`);
const within = (value: number, b: Bound) => (b.max === undefined || value <= b.max) && (b.min === undefined || value >= b.min);

/** A row with a ratio target (`{}` when only reported) and, optionally, an absolute goal on ours. */
export function row(benchmark: string, metric: string, unit: string, baseline: number, ours: number, target: Bound, goal?: Bound): BenchRow {
  const ratio = baseline === 0 ? Infinity : ours / baseline;
  const reported = target.max === undefined && target.min === undefined;
  const pass = (reported || within(ratio, target)) && (!goal || within(ours, goal));
  return {
    benchmark,
    metric,
    baseline: round(baseline),
    ours: round(ours),
    unit,
    ratio: round(ratio),
    target: reported ? 'reported' : boundText(target, 'x'),
    ...(goal ? { goal: boundText(goal, ` ${unit}`) } : {}),
    pass,
  };
}

/** Median of a few rounds (each round a figure): the table's figures are medians of rounds. */
export function median(values: number[]): number {
  return percentile(values, 50);
}

export const round = (n: number) => (Math.abs(n) >= 100 ? Math.round(n) : Math.round(n * 100) / 100);

export function percentile(samples: number[], p: number): number {
  if (!samples.length) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Runs `total` calls of `fn` with `concurrency` in flight; returns latencies (ms) and throughput. */
export async function load(concurrency: number, total: number, fn: (i: number) => Promise<unknown>) {
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        const t = performance.now();
        await fn(i);
        latencies.push(performance.now() - t);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { latencies, perSecond: total / seconds, p50: percentile(latencies, 50), p95: percentile(latencies, 95), p99: percentile(latencies, 99) };
}

/** Prints rows as Markdown tables and, when BENCH_RESULTS_FILE is set, appends them as JSON lines. */
export function report(rows: BenchRow[], print = true): void {
  if (print) process.stdout.write(tables(rows) + '\n');
  const file = process.env.BENCH_RESULTS_FILE;
  if (file) for (const r of rows) appendFileSync(file, JSON.stringify(r) + '\n');
}

/**
 * Markdown of a benchmark's own (a table by party, notes), written below its rows in its results
 * file and in its section of latest.md; appended to BENCH_RESULTS_FILE as a JSON line.
 */
export function section(benchmark: string, markdown: string): void {
  const file = process.env.BENCH_RESULTS_FILE;
  if (file) appendFileSync(file, JSON.stringify({ section: benchmark, markdown }) + '\n');
}

/** The main table and, when some rows are details, the details table below it. */
export function tables(rows: BenchRow[]): string {
  const details = rows.filter((r) => r.detail);
  const main = table(rows.filter((r) => !r.detail));
  return details.length ? `${main}\n\nDetails of the cost rows:\n\n${table(details)}` : main;
}

// A figure that could not be measured (NaN; null once through JSON) or a ratio to zero.
const finite = (v: number | null) => typeof v === 'number' && Number.isFinite(v);
const shown = (v: number | null) => (finite(v) ? String(v) : '–');

export function table(rows: BenchRow[]): string {
  const head =
    '| benchmark | metric | baseline | ours | unit | ratio | ratio target | absolute goal | x limit | met |\n|---|---|---|---|---|---|---|---|---|---|';
  const lines = rows.map((r) =>
    r.limit
      ? `| **${r.benchmark}** | ${r.metric} | – | ${r.ours} | ${r.unit} | – | – | – | 1x | – |`
      : `| ${r.benchmark} | ${r.metric} | ${shown(r.baseline)} | ${shown(r.ours)} | ${r.unit} | ${!finite(r.ratio) ? '–' : r.addedUnit ? `${r.ratio < 0 ? '' : '+'}${r.ratio} ${r.addedUnit}` : `${r.ratio}x`} | ${r.target} | ${r.goal ?? '–'} | ${r.perLimit !== undefined ? `${r.perLimit}x` : '–'} | ${r.pass ? 'yes' : 'no'} |`,
  );
  return [head, ...lines].join('\n');
}

/** A scratch directory PostgreSQL (run as the postgres user when we are root) can enter. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(dir, 0o755);
  return dir;
}

/** What a benchmark started, to stop last first whether it finished or failed (no server left behind). */
export function cleanups() {
  const list: (() => unknown)[] = [];
  return {
    add(fn: () => unknown) {
      list.push(fn);
    },
    async run() {
      for (const fn of list.splice(0).reverse()) {
        try {
          await fn();
        } catch (err) {
          console.error('cleanup failed:', err);
        }
      }
    },
  };
}

/** Runs a benchmark's main function as a script: exit 0 when it finishes, 1 with the error otherwise. */
export function runMain(main: () => Promise<void>): void {
  main().then(
    () => process.exit(0),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}

export const basicAuth = (login: string, password: string) => `Basic ${Buffer.from(`${login}:${password}`).toString('base64')}`;

/** A JSON call to the service that returns the envelope's `data`, throwing on anything but 2xx (set-up steps of the scripts). */
export function apiCaller(base: string, authorization: string) {
  return async (method: string, path: string, body?: unknown): Promise<any> => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { authorization, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const json = (await res.json()) as { data: unknown };
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
    return json.data;
  };
}
