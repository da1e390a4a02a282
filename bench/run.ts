/**
 * `npm run bench`: runs every benchmark (workflows, records, licence verify, agent) one after another, each against
 * its baseline side by side, then prints one table of all of them (baseline, ours, ratio,
 * target) and writes it to bench/results/latest.md. `npm run bench -- records` runs a subset and
 * writes bench/results/records.md. `npm run bench -- cost` runs only the workflow engine's
 * time-and-cost workloads (a few minutes) and writes bench/results/cost.md; it also replaces the
 * cost section of latest.md, so latest.md always carries the newest cost figures.
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
  { name: 'for-each', file: 'for-each.bench.ts' },
];
const only = process.argv.slice(2);
const chosen = benchmarks.filter((b) => (only.length ? only.some((name) => b.name.includes(name)) : !b.onRequest));
const resultsFile = join(tmpdir(), `svc-bench-${process.pid}.jsonl`);
rmSync(resultsFile, { force: true });
writeFileSync(resultsFile, '');

const COST_START = '<!-- cost: npm run bench -- cost replaces this section -->';
const COST_END = '<!-- end of cost -->';
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

const rows = readFileSync(resultsFile, 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => JSON.parse(l) as BenchRow);
rmSync(resultsFile, { force: true });
const costOnly = only.length === 1 && only[0] === 'cost';
const isCost = (r: BenchRow) => costOnly || r.benchmark.startsWith('cost:');
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(', ');
const when = `Run on ${new Date().toISOString()} (${process.platform}/${process.arch}, Node ${process.version}, ${cpus().length} cores), load average before ${loadBefore}, after ${load()} (1, 5, 15 min).`;
// The cost rows: a section of their own, between markers, that `npm run bench -- cost` replaces in latest.md.
const costRows = rows.filter(isCost);
const costSection = costRows.length
  ? [
      COST_START,
      '## What a run costs',
      '',
      `${costOnly ? when : 'From the run above.'} Each workload is run by ours and by the bare SDK in interleaved rounds; time figures are medians of the rounds, cost figures the totals over the rounds divided by the runs (or nodes); "rounds:" in a metric gives the range of its figure over the rounds. Ratios are ours / bare SDK.`,
      '',
      tables(costRows),
      COST_END,
    ].join('\n')
  : '';
const summary = [
  `# Benchmarks`,
  ``,
  `${when} Ratios are ours / baseline, run side by side on the same machine.`,
  ``,
  ...(costOnly ? [costSection] : [tables(rows.filter((r) => !isCost(r))), ...(costSection ? ['', costSection] : [])]),
  ...(failed.length ? ['', `Failed to run: ${failed.join(', ')}`] : []),
  '',
].join('\n');
process.stdout.write('\n' + summary);
mkdirSync(join(dir, 'results'), { recursive: true });
// The whole run is latest.md; a subset (`npm run bench -- cluster`) writes its own file beside it.
writeFileSync(join(dir, 'results', only.length ? `${only.join('-')}.md` : 'latest.md'), summary);
if (costOnly && costSection) {
  // latest.md keeps the newest cost figures: its cost section replaced (or added).
  const latest = join(dir, 'results', 'latest.md');
  const text = existsSync(latest) ? readFileSync(latest, 'utf8') : '# Benchmarks\n';
  const [from, to] = [text.indexOf(COST_START), text.indexOf(COST_END)];
  writeFileSync(
    latest,
    from >= 0 && to > from ? text.slice(0, from) + costSection + text.slice(to + COST_END.length) : `${text.trimEnd()}\n\n${costSection}\n`,
  );
}
process.exitCode = failed.length ? 1 : 0;
