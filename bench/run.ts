/**
 * `npm run bench`: runs every benchmark (workflows, records, licence verify, agent) one after another, each against
 * its baseline side by side, then prints one table of all of them (baseline, ours, ratio,
 * target) and writes it to bench/results/latest.md. `npm run bench -- records` runs a subset and
 * writes bench/results/records.md.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { table, type BenchRow } from './lib.js';

const dir = fileURLToPath(new URL('.', import.meta.url));
const benchmarks = ['workflows.bench.ts', 'records-list.ts', 'license-verify.ts', 'agent.bench.ts', 'cluster.bench.ts'];
const only = process.argv.slice(2);
const chosen = benchmarks.filter((f) => !only.length || only.some((name) => f.includes(name)));
const resultsFile = join(tmpdir(), `svc-bench-${process.pid}.jsonl`);
rmSync(resultsFile, { force: true });
writeFileSync(resultsFile, '');

const failed: string[] = [];
for (const file of chosen) {
  process.stdout.write(`\n## ${file}\n`);
  const result = spawnSync(process.execPath, ['--import', 'tsx', join(dir, file)], {
    stdio: 'inherit',
    env: { ...process.env, BENCH_RESULTS_FILE: resultsFile },
  });
  if (result.status !== 0) failed.push(file);
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
  table(rows),
  ...(failed.length ? ['', `Failed to run: ${failed.join(', ')}`] : []),
  '',
].join('\n');
process.stdout.write('\n' + summary);
mkdirSync(join(dir, 'results'), { recursive: true });
// The whole run is latest.md; a subset (`npm run bench -- cluster`) writes its own file beside it.
writeFileSync(join(dir, 'results', only.length ? `${only.join('-')}.md` : 'latest.md'), summary);
process.exitCode = failed.length ? 1 : 0;
