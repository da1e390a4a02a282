import { readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';
import { preloadedWorkflowModules } from '../src/temporal/worker.js';

/**
 * workflows/ holds deterministic code only. The rule is ESLint's (eslint.config.js,
 * `workflowImportRules`), run here on the real files and on snippets that must be refused, so the
 * suite fails both when a workflow file breaks the rule and when the rule stops catching a case.
 */
const root = new URL('..', import.meta.url).pathname;
const eslint = new ESLint({ cwd: root });
const lintWorkflowSource = async (code: string) =>
  (await eslint.lintText(code, { filePath: `${root}workflows/probe.workflow.ts` }))[0]!.messages.map((m) => m.ruleId);

describe('workflows/ holds deterministic code only', () => {
  it('every workflow file passes the lint rules, determinism included', async () => {
    const results = await eslint.lintFiles(['workflows/**/*.ts']);
    const problems = results.flatMap((r) => r.messages.map((m) => `${r.filePath.slice(root.length)}:${m.line} ${m.ruleId}: ${m.message}`));
    expect(results.length).toBeGreaterThan(3);
    expect(problems).toEqual([]);
  });

  it.each([
    ["import { readFile } from 'node:fs/promises';", 'no-restricted-imports'],
    ["import { randomUUID } from 'crypto';", 'no-restricted-imports'],
    ["export { readFile } from 'node:fs';", 'no-restricted-imports'],
    ["export * from '../src/config.js';", 'no-restricted-imports'],
    ["import { Sql } from '../src/db/sql.js';", 'no-restricted-imports'],
    ["import { Client } from '@temporalio/client';", 'no-restricted-imports'],
    ["import { createActivities } from '../activities/index.js';", 'no-restricted-imports'],
    ["export const load = () => import('node:fs');", 'no-restricted-syntax'],
    ["export const load = () => import('./defs.js');", 'no-restricted-syntax'],
  ])('refuses %s', async (code, rule) => {
    expect(await lintWorkflowSource(code)).toContain(rule);
  });

  it('allows @temporalio/workflow, sibling files and the activities’ types', async () => {
    const ok = [
      "import { sleep } from '@temporalio/workflow';",
      "import { GraphState } from './graph.js';",
      "export { runGraph } from './run-graph.workflow.js';",
      "import type { ControlActivities } from '../activities/index.js';",
      'export const noop = (a: ControlActivities, b: typeof sleep, c: GraphState) => [a, b, c];',
    ].join('\n');
    expect(await lintWorkflowSource(ok)).toEqual([]);
  });
});

describe('the workflow modules the worker preloads', () => {
  // Evaluated once per workflow thread and shared by every run: a value kept at module level
  // would leak from one run into the next, and a workflow API called at module level has no run.
  const sources = preloadedWorkflowModules.map((path) => ({ file: basename(path), path, code: readFileSync(path, 'utf8') }));

  it('keep nothing at module level and call no workflow API', () => {
    for (const { file, code } of sources) {
      expect(code, file).not.toMatch(/^(export\s+)?(let|var)\s/m);
      expect(code, file).not.toMatch(/^import\s+(?!type\b)[^;]*from\s+'@temporalio\/workflow'/m);
      expect(code, file).not.toMatch(/^(export\s+)?const\s+\w+\s*(:[^=]+)?=\s*new\s+(Map|WeakMap|Array)\b/m);
    }
  });

  it('import only one another (what they import is shared too)', () => {
    const listed = new Set(preloadedWorkflowModules);
    for (const { file, path, code } of sources) {
      for (const [, spec] of code.matchAll(/^(?:import|export)\s+(?!type\b)[^;]*?from\s+'(\.[^']+)'/gm)) {
        const imported = join(dirname(path), spec!.replace(/\.js$/, '.ts'));
        expect(listed.has(imported), `${file} imports ${spec}`).toBe(true);
      }
    }
  });
});
