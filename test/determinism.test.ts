import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

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
