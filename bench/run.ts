/**
 * `npm run bench`: runs every benchmark of DESIGN.md section 9 one after another, each against
 * its baseline side by side, then prints one table of all of them (baseline, ours, ratio,
 * target) and writes it to bench/results/latest.md. `npm run bench -- records` runs a subset;
 * `npm run bench -- cost` only the workflow engine's time-and-cost workloads (a few minutes).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
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
];
const only = process.argv.slice(2);
const chosen = benchmarks.filter((b) => (only.length ? only.some((name) => b.name.includes(name)) : !b.onRequest));
const resultsFile = join(tmpdir(), `svc-bench-${process.pid}.jsonl`);
rmSync(resultsFile, { force: true });
writeFileSync(resultsFile, '');

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
const summary = [
  `# Benchmarks`,
  ``,
  `Run on ${new Date().toISOString()} (${process.platform}/${process.arch}, Node ${process.version}). Ratios are ours / baseline, run side by side on the same machine.`,
  ``,
  tables(rows),
  ...(failed.length ? ['', `Failed to run: ${failed.join(', ')}`] : []),
  '',
].join('\n');
process.stdout.write('\n' + summary);
mkdirSync(join(dir, 'results'), { recursive: true });
writeFileSync(join(dir, 'results', 'latest.md'), summary);
process.exitCode = failed.length ? 1 : 0;
