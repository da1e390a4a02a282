#!/usr/bin/env node
// Prints CI's one result line, `N passed, M failed`, summed over every checker `.ci/run` ran:
// the vitest suite and the cluster scenario suite (their JSON reports: one count per test), the fuzz run (its JUnit report: one
// count per OpenAPI operation) and each single-verdict check (type check, compose file, lint),
// which .ci/run records as `name pass|fail` lines. A report that is missing counts as one failure,
// so a checker that crashed before writing one can never read as green.
// Usage: node scripts/ci-summary.mjs <results directory>
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: ci-summary.mjs <results directory>');
  process.exit(2);
}
let passed = 0;
let failed = 0;
const lines = [];

const checks = join(dir, 'checks.txt');
if (existsSync(checks)) {
  for (const line of readFileSync(checks, 'utf8').split('\n').filter(Boolean)) {
    const [name, verdict] = line.trim().split(/\s+/);
    if (verdict === 'pass') passed += 1;
    else failed += 1;
    lines.push(`${name}: ${verdict}`);
  }
}

// The vitest runs: `npm test` and the cluster scenario suite (`npm run test:cluster`).
for (const [name, report, expected] of [
  ['vitest', 'vitest.json', 'vitest.expected'],
  ['cluster', 'cluster.json', 'cluster.expected'],
]) {
  const file = join(dir, report);
  if (existsSync(file)) {
    const result = JSON.parse(readFileSync(file, 'utf8'));
    // Failed files that never reached their tests (an import error, a failing beforeAll) count too.
    const brokenFiles = (result.testResults ?? []).filter(
      (f) => f.status === 'failed' && (f.assertionResults ?? []).every((t) => t.status !== 'failed'),
    ).length;
    passed += result.numPassedTests;
    failed += result.numFailedTests + brokenFiles;
    lines.push(
      `${name}: ${result.numPassedTests} passed, ${result.numFailedTests} failed, ${result.numPendingTests + result.numTodoTests} skipped, ${brokenFiles} files failed outside a test`,
    );
  } else if (existsSync(join(dir, expected))) {
    failed += 1;
    lines.push(`${name}: no report (the suite did not finish)`);
  }
}

const junit = join(dir, 'fuzz.xml');
if (existsSync(junit)) {
  const xml = readFileSync(junit, 'utf8');
  const cases = xml.match(/<testcase\b[\s\S]*?(?:\/>|<\/testcase>)/g) ?? [];
  const bad = cases.filter((c) => /<(failure|error)\b/.test(c)).length;
  passed += cases.length - bad;
  failed += bad;
  lines.push(`fuzz: ${cases.length - bad} operations passed, ${bad} failed`);
} else if (existsSync(join(dir, 'fuzz.expected'))) {
  failed += 1;
  lines.push('fuzz: no report (the fuzz run did not finish)');
}

for (const line of lines) console.log(`  ${line}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
