import { z } from 'zod';
import type { NodeType } from './node-type.js';

/** Builds a new value from a JSON template; the evaluated template is the output. */
export const transformNode: NodeType<{ value: unknown }> = {
  type: 'transform',
  pure: true,
  description: 'config `{value}`: a JSON template whose `{{ }}` strings are evaluated; the result is the output.',
  configSchema: z.strictObject({ value: z.unknown() }),
  run: async ({ config }) => ({ output: config.value ?? null }),
};
