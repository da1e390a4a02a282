import { ApplicationFailure } from '@temporalio/activity';
import { z } from 'zod';
import type { NodeType } from './node-type.js';
import { CODE } from '../../workflows/error-codes.js';

/** Stops the run with a chosen error (or, with on_error "continue", records it and goes on). */
export const failNode: NodeType<{ message: string; code?: string }> = {
  type: 'fail',
  pure: true,
  description: 'config `{message, code?}`: fails the node with that message and error code (default `node_failed`).',
  configSchema: z.strictObject({
    message: z.string().min(1).max(2000),
    code: z
      .string()
      .regex(/^[a-z][a-z0-9_]{0,63}$/)
      .optional(),
  }),
  resolvedSchema: z.object({ message: z.string(), code: z.string().optional() }),
  run: async ({ config }) => {
    throw ApplicationFailure.nonRetryable(config.message, config.code ?? CODE.node_failed);
  },
};
