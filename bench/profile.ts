/**
 * `npm run bench:profile`: CPU profiles of the service under one of the cost workloads.
 *
 * Starts the benchmark's servers and the service as `npm start` runs it, under
 * `node --cpu-prof --cpu-prof-dir=<dir>` (every thread of it: the main thread, the Temporal
 * worker's workflow thread, the expression sandbox's threads), warms the workload up, runs it
 * (BENCH_ROUNDS rounds), stops the service (the profiles are written as it exits) and writes
 * `summary.md` beside them: for the workload's window only (the start-up and the warm-up left
 * out), where each thread's samples fell, by function, by package or directory, and inclusive of
 * callees; beside the process's CPU read from /proc over the same window.
 *
 *   BENCH_PROFILE_WORKLOAD  one (default): one-node http_request runs at concurrency 50;
 *                           webhook: the peer benchmark's webhook (one http_request node, answered
 *                           with its output), one request at a time (BENCH_PROFILE_CONCURRENCY
 *                           at a time when set);
 *                           http-chain: the 10-node http_request chain, one run at a time;
 *                           noop-chain: the 20-node chain of no-op nodes as regular activities
 *   BENCH_PROFILE_SIDE      ours (default), or bare: the baseline's process (bench/bare.ts) instead
 *                           (for the webhook, the peer benchmark's bare webhook with a local activity)
 *   BENCH_PROFILE_DIR       where the profiles go (default bench/results/profiles/<time>)
 *   BENCH_PROFILE_INTERVAL  sampling interval in microseconds (default 1000)
 *   BENCH_SCALE, BENCH_ROUNDS as for the benchmarks
 *
 * Open a .cpuprofile in Chrome DevTools (Performance panel: Load profile), VS Code, or speedscope.
 * `npm run bench:profile -- --summary <dir>` writes the summary of a profile directory again.
 */
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { SourceMap } from 'node:module';
import { basename, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateMasterKey } from '../src/platform/crypto.js';
import { createLogger } from '../src/platform/logger.js';
import { bundleWorkflows } from '../src/temporal/worker.js';
import { CHAIN, HTTP_CHAIN, benchWorkflows, cpuMs, oursApi, oursEnv, startBare, startOurs, startTarget, webhookWorkflow } from './harness.js';
import { cleanups, load, round, runMain, scratchDir } from './lib.js';
import { benchServers } from './servers.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const scale = Number(process.env.BENCH_SCALE ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WORKLOAD = process.env.BENCH_PROFILE_WORKLOAD ?? 'one';
const SIDE = process.env.BENCH_PROFILE_SIDE ?? 'ours';
const INTERVAL = Number(process.env.BENCH_PROFILE_INTERVAL ?? 1000);
const CONCURRENCY = Number(process.env.BENCH_PROFILE_CONCURRENCY || 1);
const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');

async function main() {
  if (!['one', 'webhook', 'http-chain', 'noop-chain'].includes(WORKLOAD))
    throw new Error(`BENCH_PROFILE_WORKLOAD: one, webhook, http-chain or noop-chain, not ${WORKLOAD}`);
  if (!['ours', 'bare'].includes(SIDE)) throw new Error(`BENCH_PROFILE_SIDE: ours or bare, not ${SIDE}`);
  if (!Number.isInteger(CONCURRENCY) || CONCURRENCY < 1)
    throw new Error(`BENCH_PROFILE_CONCURRENCY: a whole number of at least 1, not ${process.env.BENCH_PROFILE_CONCURRENCY}`);
  const out = resolve(process.env.BENCH_PROFILE_DIR ?? join(root, 'bench', 'results', 'profiles', new Date().toISOString().replace(/[:.]/g, '-')));
  mkdirSync(out, { recursive: true });
  const cleanup = cleanups();
  try {
    await profile(out, cleanup);
  } finally {
    await cleanup.run();
  }
  await writeSummary(out);
}

async function profile(out: string, cleanup: ReturnType<typeof cleanups>) {
  const env = await benchServers('profile', logger);
  cleanup.add(() => env.stop());
  const target = await startTarget();
  cleanup.add(() => target.close());
  const dir = scratchDir('svc-bench-profile-');
  cleanup.add(() => rmSync(dir, { recursive: true, force: true }));
  const profiler = ['--cpu-prof', `--cpu-prof-dir=${out}`, `--cpu-prof-interval=${INTERVAL}`];
  const runsPerRound = WORKLOAD === 'one' || WORKLOAD === 'webhook' ? Math.max(50, Math.round(200 * scale)) : Math.max(2, Math.round(6 * scale));
  let profiled: { pid: number; stop: () => Promise<void> };
  let round_: (runs: number) => Promise<unknown>;
  if (SIDE === 'bare') {
    // The baseline's worker and client under the same profiler, for comparison.
    const bare = await startBare(env.temporalAddress, 'bench-profile-bare', profiler);
    cleanup.add(() => bare.stop());
    profiled = bare;
    if (WORKLOAD === 'webhook') {
      // The peer benchmark's bare webhook with a local activity: the floor the service's webhook is set against.
      const url = (await bare.run({ type: 'bareHook', args: [`${target.url}/`, true], total: 0, concurrency: 0, serve: true })).url!;
      round_ = (runs) =>
        load(CONCURRENCY, runs, async () => {
          const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
          if (res.status !== 200) throw new Error(`the bare webhook answered ${res.status}: ${await res.text()}`);
        });
    } else {
      const [type, args]: [string, unknown[]] =
        WORKLOAD === 'one'
          ? ['bareHttpChain', [1, target.url]]
          : WORKLOAD === 'http-chain'
            ? ['bareHttpChain', [HTTP_CHAIN, target.url]]
            : ['bareChain', [CHAIN, false]];
      round_ = (runs) => bare.run({ type, args, total: runs, concurrency: WORKLOAD === 'one' ? 50 : 1 });
    }
  } else {
    // Kept beside the profiles: workflow code's frames are mapped back through its source map.
    const bundlePath = join(out, 'workflow-bundle.js');
    await writeFile(bundlePath, (await bundleWorkflows()).code);
    const ours = await startOurs(
      await oursEnv({
        databaseUrl: env.databaseUrl,
        temporalAddress: env.temporalAddress,
        queue: 'bench-profile',
        localPureNodes: WORKLOAD !== 'noop-chain',
        key: generateMasterKey(),
        bundlePath,
        dir,
        targetUrl: target.url,
      }),
      join(out, 'service.log'),
      profiler,
    );
    cleanup.add(() => ours.stop());
    const { call, run } = oursApi(ours);
    const workflows = await benchWorkflows(call, target.url);
    const hook = await webhookWorkflow(call, target.url);
    const callHook = async (i: number) => {
      const res = await fetch(`${ours.api}${hook.path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-webhook-secret': hook.secret },
        body: JSON.stringify({ i }),
      });
      if (res.status !== 200) throw new Error(`webhook answered ${res.status}: ${await res.text()}`);
    };
    profiled = ours;
    round_ = async (runs) => {
      if (WORKLOAD === 'one') return load(50, runs, (i) => run(workflows.oneHttp, { i }));
      if (WORKLOAD === 'webhook') return load(CONCURRENCY, runs, callHook);
      for (let i = 0; i < runs; i++) await run(WORKLOAD === 'http-chain' ? workflows.httpChain : workflows.pureChain);
    };
  }

  await round_(Math.min(runsPerRound, 50)); // warm-up
  // V8 stamps samples with the monotonic clock in microseconds, as process.hrtime does in ns.
  const from = process.hrtime.bigint() / 1000n;
  const cpuFrom = cpuMs(profiled.pid);
  const started = performance.now();
  for (let i = 0; i < ROUNDS; i++) await round_(runsPerRound);
  const seconds = (performance.now() - started) / 1000;
  const cpu = cpuMs(profiled.pid) - cpuFrom;
  const to = process.hrtime.bigint() / 1000n;
  // The profiles are written as the process exits.
  await profiled.stop();

  const runs = ROUNDS * runsPerRound;
  const nodes = runs * (WORKLOAD === 'one' || WORKLOAD === 'webhook' ? 1 : WORKLOAD === 'http-chain' ? HTTP_CHAIN : CHAIN);
  const window: Window = {
    from: Number(from),
    to: Number(to),
    side: SIDE,
    workload: WORKLOAD,
    runs,
    nodes,
    seconds,
    cpu,
    interval: INTERVAL,
    concurrency: CONCURRENCY,
  };
  writeFileSync(join(out, 'window.json'), JSON.stringify(window, null, 2) + '\n');
}

/** The workload's window on the monotonic clock (µs), what ran in it and the process's CPU over it. */
interface Window {
  from: number;
  to: number;
  side: string;
  workload: string;
  runs: number;
  nodes: number;
  seconds: number;
  cpu: number;
  interval: number;
  /** Requests at a time (the webhook workload); absent in windows written before it was recorded. */
  concurrency?: number;
}

/** Writes summary.md of the profiles in `dir` (again, with `npm run bench:profile -- --summary <dir>`). */
async function writeSummary(dir: string) {
  const window = JSON.parse(readFileSync(join(dir, 'window.json'), 'utf8')) as Window;
  const esbuild = await import('esbuild').catch(() => undefined);
  const summary = summarise(esbuild?.transformSync, dir, window);
  writeFileSync(join(dir, 'summary.md'), summary);
  process.stdout.write(summary + `\nProfiles and this summary: ${relative(process.cwd(), dir) || dir}\n`);
}

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number }; children?: number[] }[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** Where a frame's code lives: a package, a directory of ours, Node's own, or V8's pseudo-frames. */
function areaOf(url: string, functionName: string): string {
  if (!url) return functionName.startsWith('(') ? functionName : '(V8 builtins and native code)';
  if (url.startsWith('node:')) return 'node: (Node.js internals)';
  const path = url.replace(/^file:\/\//, '');
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
  if (pkg) return pkg[1]!;
  const rel = relative(root, path);
  if (rel.startsWith('..')) return path;
  const parts = rel.split('/');
  return parts[0] === 'src' && parts.length > 2 ? `src/${parts[1]}` : parts[0]!;
}

type Transform = typeof import('esbuild').transformSync;
type CallFrame = CpuProfile['nodes'][number]['callFrame'];

/**
 * Where a frame is, in the original source: its area (package or directory) and `name file:line`.
 * tsx runs our TypeScript as esbuild turns it into one line of JavaScript (`minifyWhitespace`), so
 * V8 reports line 1 and a column: the same transform, with its source map, gives the line back
 * (approximately in a file with a dynamic `import()`, which tsx rewrites afterwards). Workflow
 * code runs from the workflow bundle (`<cwd>/workflow-bundle-<hash>.js`), mapped back through the
 * bundle's inline source map (the bundle is kept beside the profiles as workflow-bundle.js).
 */
function resolver(transform: Transform | undefined, dir: string) {
  const maps = new Map<string, SourceMap | undefined>();
  const mapOf = (key: string, load: () => SourceMap) => {
    if (!maps.has(key)) {
      try {
        maps.set(key, load());
      } catch {
        maps.set(key, undefined);
      }
    }
    return maps.get(key);
  };
  const bundleMap = () => {
    const code = readFileSync(join(dir, 'workflow-bundle.js'), 'utf8');
    const data = /\/\/# sourceMappingURL=data:application\/json;(?:charset=utf-8;)?base64,(\S+)\s*$/.exec(code)![1]!;
    return new SourceMap(JSON.parse(Buffer.from(data, 'base64').toString('utf8')));
  };
  const tsMap = (path: string) => () => {
    const { map } = transform!(readFileSync(path, 'utf8'), {
      target: `node${process.versions.node}`,
      loader: 'default',
      format: 'esm',
      sourcefile: path,
      sourcemap: true,
      minifyWhitespace: true,
      keepNames: true,
    } as never);
    return new SourceMap(JSON.parse(map));
  };
  const cache = new Map<CallFrame, { area: string; name: string }>();
  return (f: CallFrame) => {
    let found = cache.get(f);
    if (found) return found;
    const fn = f.functionName || '(anonymous)';
    let path = f.url.replace(/^file:\/\//, '');
    let line = f.lineNumber;
    const bundle = /(^|\/)workflow-bundle-[0-9a-f]+\.js$/.test(path) ? mapOf('bundle', bundleMap) : undefined;
    // Only the bundle kept here: the bare SDK's worker runs a bundle of its own.
    if (bundle && basename((bundle.payload as { file?: string }).file ?? '') === basename(path)) {
      const entry = bundle.findEntry(f.lineNumber, f.columnNumber) as { originalSource?: string; originalLine?: number } | undefined;
      if (entry?.originalSource) [path, line] = [entry.originalSource.replace(/^webpack:\/\/[^/]*/, '').replace(/^file:\/\//, ''), entry.originalLine!];
    } else if (/\.[cm]?ts$/.test(path) && transform) {
      const entry = mapOf(path, tsMap(path))?.findEntry(f.lineNumber, f.columnNumber) as { originalLine?: number } | undefined;
      if (entry?.originalLine !== undefined) line = entry.originalLine;
    }
    const area = areaOf(path ? `file://${path}` : '', f.functionName);
    found = { area, name: path ? `${fn} ${path.startsWith('/') ? relative(root, path) : path}:${line + 1}` : fn };
    cache.set(f, found);
    return found;
  };
}

const own = (area: string) => area === 'activities' || area === 'workflows' || area.startsWith('src/') || area === 'src';

const TEMPORAL_SDK = /^(@temporalio\/|rxjs$|@grpc\/|protobufjs$|@protobufjs\/|long$|proto3-json-serializer$)/;
const PG_CLIENT = /^(pg|pg-protocol|pg-pool|knex|tarn|@mikro-orm\/.*)$/;
const isNodeOrV8 = (area: string) => area.startsWith('node:') || area.startsWith('(');

/**
 * What a sample of a thread was doing, in the terms the cost notes use (docs/performance.md):
 * socket writes (by who wrote: the PostgreSQL client or an HTTP response), the payload codec,
 * waiting for a run's result, egress checks and undici, the Temporal SDK's own code (its core
 * bridge, worker, client, rxjs, gRPC over http2, protobuf and the workflow thread's postMessage),
 * the PostgreSQL client, Koa, the rest of our code. A stack is read from its leaf up: Node's and
 * V8's frames count for the nearest package or directory that called them.
 */
function categoryOf(stack: { area: string; name: string; fn: string; url: string }[]): string {
  const leaf = stack[0]!;
  const has = (test: (f: (typeof stack)[number]) => boolean) => stack.some(test);
  if (leaf.fn === 'writev' || leaf.fn === 'writeGeneric' || leaf.fn === 'writevGeneric') {
    if (has((f) => PG_CLIENT.test(f.area))) return 'socket writes (writev): PostgreSQL queries';
    if (has((f) => f.area === 'koa' || f.area === 'src/http' || f.url.startsWith('node:_http'))) return 'socket writes (writev): HTTP responses';
    return 'socket writes (writev): other';
  }
  if (has((f) => f.name.includes('src/temporal/codec.ts') || /^(encryptBytes|decryptBytes) /.test(f.name))) return 'payload codec (AES-GCM)';
  if (has((f) => f.name.startsWith('waitForResult '))) return "waiting for a run's result (API)";
  if (has((f) => f.name.includes('src/platform/egress.ts') || f.area === 'undici')) return "egress checks and undici (the node's HTTP call)";
  if (leaf.fn === 'postMessage' || has((f) => f.url.startsWith('node:internal/worker'))) return 'Temporal SDK: workflow thread postMessage (activations)';
  if (has((f) => f.url.startsWith('node:internal/http2'))) return 'Temporal SDK: gRPC over http2 (client)';
  if (leaf.fn === '(garbage collector)') return '(garbage collector)';
  if (leaf.fn === '(program)') return '(program: V8 and native, no JavaScript stack)';
  const owner = stack.find((f) => !isNodeOrV8(f.area))?.area;
  if (owner === undefined) return 'Node.js and V8 with no package on the stack (timers, microtasks, sockets)';
  if (TEMPORAL_SDK.test(owner))
    return `Temporal SDK: ${owner.startsWith('@temporalio/') ? owner : owner === 'rxjs' ? 'rxjs (worker)' : `${owner} (gRPC, protobuf)`}`;
  if (PG_CLIENT.test(owner)) return 'PostgreSQL client (pg, knex, MikroORM), but for its writes';
  if (owner === 'koa' || owner === '@koa/router' || owner.startsWith('koa-')) return 'Koa and its router';
  if (own(owner)) return `our code: ${owner}`;
  return `other packages: ${owner}`;
}

/** The profiles in `dir` restricted to [from, to] (µs, monotonic), summarised. */
const WORKLOAD_TITLES: Record<string, string> = {
  one: 'one-node http_request runs at concurrency 50',
  webhook: 'the peer webhook (one http_request node, answered with its output)',
  'http-chain': `${HTTP_CHAIN}-node http_request chain`,
  'noop-chain': `${CHAIN}-node no-op chain as activities`,
};

/** What was profiled: the workload, and how many webhook requests at a time. */
function titleOf(w: Window): string {
  const title = WORKLOAD_TITLES[w.workload] ?? w.workload;
  if (w.workload !== 'webhook') return title;
  const concurrency = w.concurrency ?? 1;
  return `${title}, ${concurrency > 1 ? `${concurrency} requests at a time` : 'one request at a time'}`;
}

function summarise(transform: Transform | undefined, dir: string, w: Window): string {
  const { from, to } = w;
  const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'));
  const frameOf = resolver(transform, dir);
  const unit = w.workload === 'one' || w.workload === 'webhook' ? 'run' : 'node';
  const units = unit === 'run' ? w.runs : w.nodes;
  const lines: string[] = [
    `# CPU profile: ${titleOf(w)}`,
    '',
    `${w.side === 'bare' ? "The bare SDK (bench/bare.ts: the baseline workflows' worker and the client that starts them)." : 'The service as `npm start` runs it (API and worker in one process).'}`,
    '',
    `${w.runs} runs (${w.nodes} nodes) in ${round(w.seconds)} s. The process used ${round(w.cpu)} ms of CPU over them (/proc: every thread, JavaScript or not): ${round(w.cpu / units)} ms per ${unit}.`,
    `Samples of the window only; "ms per ${unit}" divides a row's sampled time by the ${units} ${unit}s. Sampling every ${w.interval} µs.`,
    '',
  ];
  let sampledBusy = 0;
  const sections: string[] = [];
  for (const file of files.sort()) {
    const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
    const byId = new Map(profile.nodes.map((n) => [n.id, n]));
    const parent = new Map<number, number>();
    for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
    // Sample i lasts until sample i + 1 (as DevTools counts it).
    const times: number[] = [];
    let t = profile.startTime;
    for (const d of profile.timeDeltas) times.push((t += d));
    const self = new Map<string, number>();
    const selfArea = new Map<string, number>();
    const inclusiveArea = new Map<string, number>();
    const inclusiveOwn = new Map<string, number>();
    const category = new Map<string, number>();
    let busy = 0;
    let idle = 0;
    for (let i = 0; i < profile.samples.length - 1; i++) {
      if (times[i]! < from || times[i]! > to) continue;
      const ms = (times[i + 1]! - times[i]!) / 1000;
      const node = byId.get(profile.samples[i]!)!;
      if (node.callFrame.functionName === '(idle)') {
        idle += ms;
        continue;
      }
      busy += ms;
      const { area, name } = frameOf(node.callFrame);
      self.set(name, (self.get(name) ?? 0) + ms);
      selfArea.set(area, (selfArea.get(area) ?? 0) + ms);
      const stack: { area: string; name: string; fn: string; url: string }[] = [];
      const seenArea = new Set<string>();
      const seenOwn = new Set<string>();
      for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
        const f = byId.get(id)!.callFrame;
        if (f.functionName === '(root)') continue;
        const { area: a, name: n } = frameOf(f);
        stack.push({ area: a, name: n, fn: f.functionName, url: f.url });
        seenArea.add(a);
        if (own(a)) seenOwn.add(n);
      }
      for (const a of seenArea) inclusiveArea.set(a, (inclusiveArea.get(a) ?? 0) + ms);
      for (const f of seenOwn) inclusiveOwn.set(f, (inclusiveOwn.get(f) ?? 0) + ms);
      const c = stack.length ? categoryOf(stack) : '(root)';
      category.set(c, (category.get(c) ?? 0) + ms);
    }
    sampledBusy += busy;
    if (busy < 1) continue;
    const wall = (to - from) / 1000;
    const temporalSdk = [...category.entries()].filter(([k]) => k.startsWith('Temporal SDK')).reduce((sum, [, v]) => sum + v, 0);
    const top = (m: Map<string, number>, n: number) =>
      [...m.entries()]
        .sort((a, b) => b[1] - a[1])
        .slice(0, n)
        .map(([k, v]) => `| ${k.replace(/\|/g, '\\|')} | ${round(v)} | ${round((100 * v) / busy)} % | ${round(v / units)} |`);
    const head = (what: string) => [`| ${what} | ms | share of the thread's busy time | ms per ${unit} |`, '|---|---|---|---|'];
    sections.push(
      `## ${file}`,
      '',
      `Busy ${round(busy)} ms (${round(busy / units)} ms per ${unit}), idle ${round(idle)} ms.`,
      '',
      `What the thread did, of its wall time over the window (${round(wall)} ms) and of its busy time (each sample counted once, in the first of these that fits: socket writes, the codec, waiting for a result, egress; else the nearest package or directory on its stack):`,
      '',
      `| what | ms | share of wall | share of busy | ms per ${unit} |`,
      '|---|---|---|---|---|',
      `| idle | ${round(idle)} | ${round((100 * idle) / wall)} % | – | – |`,
      ...[...category.entries()]
        .sort((a, b) => b[1] - a[1])
        .reduce<[string, number][]>((list, [k, v]) => {
          // The first 25 on their own, the rest in one row.
          if (list.length < 25) list.push([k, v]);
          else if (list.length === 25) list.push(['the rest', v]);
          else list[25]![1] += v;
          return list;
        }, [])
        .map(([k, v]) => `| ${k} | ${round(v)} | ${round((100 * v) / wall)} % | ${round((100 * v) / busy)} % | ${round(v / units)} |`),
      `| **Temporal SDK in all** | ${round(temporalSdk)} | ${round((100 * temporalSdk) / wall)} % | ${round((100 * temporalSdk) / busy)} % | ${round(temporalSdk / units)} |`,
      '',
      'Self time by package or directory:',
      '',
      ...head('where'),
      ...top(selfArea, 25),
      '',
      'Inclusive time by package or directory (samples with that code anywhere on the stack):',
      '',
      ...head('where'),
      ...top(inclusiveArea, 25),
      '',
      'Inclusive time of our own functions (src/, activities/, workflows/):',
      '',
      ...head('function'),
      ...top(inclusiveOwn, 40),
      '',
      'Self time by function:',
      '',
      ...head('function'),
      ...top(self, 40),
      '',
    );
  }
  lines.push(
    `Its JavaScript threads were sampled busy (not idle) for ${round(sampledBusy)} ms in all. V8 samples on the wall clock, so a thread that waits for a core (two, shared) still shows its stack: on a loaded machine that exceeds the CPU it used, and the shares within a thread are the figures to read. The process's CPU outside its JavaScript threads (the Temporal SDK's Rust core, V8's garbage-collector helpers, libuv's pool) is in no profile.`,
    '',
    ...sections,
  );
  return lines.join('\n');
}

runMain(process.argv[2] === '--summary' ? () => writeSummary(resolve(process.argv[3] ?? '.')) : main);
