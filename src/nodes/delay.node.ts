import { z } from 'zod';
import type { NodeType } from './node-type.js';

/** A durable timer in the workflow: survives worker restarts, costs no worker while waiting. */
export const delayNode: NodeType<{ duration_ms: number }> = {
  type: 'delay',
  pure: false,
  runsAs: 'timer',
  description: 'config `{duration_ms}` (1 ms to 366 days): waits on a durable Temporal timer. Output `{waited_ms}`.',
  configSchema: z.strictObject({
    duration_ms: z
      .number()
      .int()
      .min(1)
      .max(366 * 24 * 3600 * 1000),
  }),
};
