/**
 * `npm run bench`: runs every benchmark in this folder one after another (each prints its own
 * table of ratios against its baseline) and exits non-zero when one fails.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const dir = fileURLToPath(new URL('.', import.meta.url));
const only = process.argv.slice(2);
const benches = readdirSync(dir)
  .filter((f) => f.endsWith('.ts') && f !== 'run.ts')
  .filter((f) => !only.length || only.some((name) => f.includes(name)))
  .sort();
let failed = 0;
for (const file of benches) {
  process.stdout.write(`\n## ${file}\n`);
  const result = spawnSync(process.execPath, ['--import', 'tsx', `${dir}${file}`], { stdio: 'inherit' });
  if (result.status !== 0) failed++;
}
process.exitCode = failed ? 1 : 0;
