import { z } from 'zod';
import type { NodeType } from './node-type.js';

/** Evaluates an expression; edges with branch `true` or `false` follow the answer. */
export const conditionNode: NodeType<{ expression: unknown }> = {
  type: 'condition',
  pure: true,
  description: 'config `{expression}`: evaluated for truthiness; outgoing edges carry `branch: "true"` or `"false"`. Output `{result}`.',
  configSchema: z.strictObject({ expression: z.unknown() }),
  branches: () => ['true', 'false'],
  run: async ({ config }) => {
    const value = config.expression;
    const result = Array.isArray(value) ? value.length > 0 : Boolean(value);
    return { output: { result }, branch: String(result) };
  },
};
