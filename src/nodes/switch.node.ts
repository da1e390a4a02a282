import { z } from 'zod';
import type { NodeType } from './node-type.js';

/** Routes on a value: the edge whose branch equals it is taken, else the `default` edge. */
export const switchNode: NodeType<{ value: unknown; cases: string[] }> = {
  type: 'switch',
  pure: true,
  description:
    'config `{value, cases: [string]}`: `value` is evaluated and compared (as text) with each case; edges carry `branch: "<case>"` or `"default"`. Output `{branch, value}`.',
  configSchema: z.strictObject({ value: z.unknown(), cases: z.array(z.string().min(1)).min(1).max(100) }),
  branches: (config) => [...((config.cases as string[] | undefined) ?? []), 'default'],
  run: async ({ config }) => {
    const text = typeof config.value === 'string' ? config.value : JSON.stringify(config.value ?? null);
    const branch = config.cases.includes(text) ? text : 'default';
    return { output: { branch, value: config.value ?? null }, branch };
  },
};
