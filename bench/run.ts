/**
 * `npm run bench`: runs every benchmark (workflows, records, licence verify, agent) one after another, each against
 * its baseline side by side, then prints one table of all of them (baseline, ours, ratio,
 * target) and writes it to bench/results/latest.md. `npm run bench -- records` runs a subset and
 * writes bench/results/records.md. Two benchmarks run only when named, each with a section of its
 * own in latest.md that it replaces, so latest.md always carries their newest figures:
 * `npm run bench -- cost` (the workflow engine's time-and-cost workloads, a few minutes; writes
 * bench/results/cost.md) and `npm run bench -- peer` (the service beside n8n and the bare SDK on the
 * same webhook workflow; writes bench/results/peer.md).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tables, type BenchRow } from './lib.js';

const dir = fileURLToPath(new URL('.', import.meta.url));
interface Benchmark {
  name: string;
  file: string;
  env?: Record<string, string>;
  /** Run only when named (its rows are part of another's). */
  onRequest?: boolean;
}
const benchmarks: Benchmark[] = [
  { name: 'workflows', file: 'workflows.bench.ts' },
  { name: 'cost', file: 'workflows.bench.ts', env: { BENCH_WORKLOADS: 'cost' }, onRequest: true },
  { name: 'records-list', file: 'records-list.ts' },
  { name: 'license-verify', file: 'license-verify.ts' },
  { name: 'agent', file: 'agent.bench.ts' },
  { name: 'cluster', file: 'cluster.bench.ts' },
  { name: 'peer', file: 'peer.bench.ts', onRequest: true },
  { name: 'breakdown', file: 'breakdown.ts', onRequest: true },
  { name: 'for-each', file: 'for-each.bench.ts' },
];
/** Benchmarks run only when named whose figures latest.md keeps in a section of their own. */
const SECTIONS: Record<string, string> = {
  cost: 'What a run costs',
  peer: 'Beside n8n and the bare SDK: webhook -> HTTP GET -> respond',
  breakdown: "Where a webhook run's time goes",
};
const only = process.argv.slice(2);
const chosen = benchmarks.filter((b) => (only.length ? only.some((name) => b.name.includes(name)) : !b.onRequest));
const resultsFile = join(tmpdir(), `svc-bench-${process.pid}.jsonl`);
rmSync(resultsFile, { force: true });
writeFileSync(resultsFile, '');

const sectionStart = (name: string) => `<!-- ${name}: npm run bench -- ${name} replaces this section -->`;
const sectionEnd = (name: string) => `<!-- end of ${name} -->`;
const loadBefore = loadavg()
  .map((l) => l.toFixed(2))
  .join(', ');

const failed: string[] = [];
for (const { name, file, env } of chosen) {
  process.stdout.write(`\n## ${name} (${file})\n`);
  const result = spawnSync(process.execPath, ['--import', 'tsx', join(dir, file)], {
    stdio: 'inherit',
    env: { ...process.env, ...env, BENCH_RESULTS_FILE: resultsFile },
  });
  if (result.status !== 0) failed.push(name);
}

const lines = readFileSync(resultsFile, 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => JSON.parse(l) as BenchRow | { section: string; markdown: string });
rmSync(resultsFile, { force: true });
const rows = lines.filter((l): l is BenchRow => 'benchmark' in l);
/** Markdown a benchmark wrote besides its rows, by benchmark. */
const extra = new Map<string, string>();
for (const l of lines) if ('section' in l) extra.set(l.section, [extra.get(l.section), l.markdown].filter(Boolean).join('\n\n'));
/** The section a row belongs to: cost rows are named so; a run of one sectioned benchmark is all its own. */
const single = only.length === 1 && SECTIONS[only[0]!] ? only[0]! : undefined;
const sectionOf = (r: BenchRow) => single ?? (r.benchmark.startsWith('cost:') ? 'cost' : undefined);
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(', ');
const when = `Run on ${new Date().toISOString()} (${process.platform}/${process.arch}, Node ${process.version}, ${cpus().length} cores), load average before ${loadBefore}, after ${load()} (1, 5, 15 min).`;
const notes: Record<string, string> = {
  cost: 'Each workload is run by ours and by the bare SDK in interleaved rounds; time figures are medians of the rounds, cost figures the totals over the rounds divided by the runs (or nodes); "rounds:" in a metric gives the range of its figure over the rounds. Ratios are ours / bare SDK.',
  breakdown: "The peer benchmark's webhook workflow at concurrency 1 on the embedded default (bench/breakdown.ts).",
  peer: 'The same webhook workflow on n8n, the bare Temporal SDK and the service, measured in interleaved rounds (bench/peer.bench.ts); ratios are ours / the party named.',
};
/** A section's text between its markers: its rows and what its benchmark wrote besides them. */
const sectionText = (name: string) => {
  const own = rows.filter((r) => sectionOf(r) === name);
  if (!own.length && !extra.has(name)) return '';
  return [
    sectionStart(name),
    `## ${SECTIONS[name]}`,
    '',
    `${single ? when : 'From the run above.'} ${notes[name] ?? ''}`.trim(),
    '',
    ...(own.length ? [tables(own)] : []),
    ...(extra.has(name) ? ['', extra.get(name)!] : []),
    sectionEnd(name),
  ].join('\n');
};
const latest = join(dir, 'results', 'latest.md');
const previous = existsSync(latest) ? readFileSync(latest, 'utf8') : '';
/** A section as latest.md holds it now (a whole run keeps the newest figures of a benchmark it did not run). */
const kept = (name: string) => {
  const [from, to] = [previous.indexOf(sectionStart(name)), previous.indexOf(sectionEnd(name))];
  return from >= 0 && to > from ? previous.slice(from, to + sectionEnd(name).length) : '';
};
const sections = Object.keys(SECTIONS)
  .map((name) => [name, sectionText(name) || (only.length ? '' : kept(name))] as const)
  .filter(([, text]) => text);
const summary = [
  `# Benchmarks`,
  ``,
  `${when} Ratios are ours / baseline, run side by side on the same machine.`,
  ``,
  ...(single ? [] : [tables(rows.filter((r) => !sectionOf(r)))]),
  ...sections.map(([, text]) => (single ? text : `\n${text}`)),
  ...(failed.length ? ['', `Failed to run: ${failed.join(', ')}`] : []),
  '',
].join('\n');
process.stdout.write('\n' + summary);
mkdirSync(join(dir, 'results'), { recursive: true });
// The whole run is latest.md; a subset (`npm run bench -- cluster`) writes its own file beside it.
writeFileSync(join(dir, 'results', only.length ? `${only.join('-')}.md` : 'latest.md'), summary);
if (only.length) {
  // latest.md keeps the newest figures of a sectioned benchmark run on its own: its section replaced (or added).
  let text = previous || '# Benchmarks\n';
  for (const [name, body] of sections) {
    const [from, to] = [text.indexOf(sectionStart(name)), text.indexOf(sectionEnd(name))];
    text = from >= 0 && to > from ? text.slice(0, from) + body + text.slice(to + sectionEnd(name).length) : `${text.trimEnd()}\n\n${body}\n`;
  }
  if (sections.length) writeFileSync(latest, text);
}
process.exitCode = failed.length ? 1 : 0;
