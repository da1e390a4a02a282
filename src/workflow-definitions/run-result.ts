import { z } from 'zod';
import { named } from '../http/openapi.js';
import type { RunGraphResult } from '../../workflows/defs.js';
import { withheldError } from '../executions/run-data-access.js';

export const runResult = z.object({
  execution_id: z.number().int(),
  status: z.string(),
  output: z.unknown(),
  error: z
    .object({ code: z.string(), message: z.string(), node_id: z.string().optional(), data: z.unknown().optional() })
    .nullable()
    .describe('Why the run failed: the node, its error code and message, and what the failure carries; null unless failed'),
  redacted: z
    .boolean()
    .describe(
      "True when the run acted with rights the caller does not hold (its Idempotency-Key was first used by someone else): `output` is withheld (null), and so are the error's message and data",
    ),
});
named(runResult, 'RunResult', {
  description: 'A run that finished while the call waited: its status, the output of the node that finished last, and its error',
  examples: [
    { execution_id: 42, status: 'success', output: { text: 'HELLO, ADA' }, error: null, redacted: false },
    { execution_id: 43, status: 'failed', output: null, error: { code: 'card_declined', message: 'The card was declined', node_id: 'check' }, redacted: false },
  ],
});

/**
 * A finished run as `?wait=true` and a webhook's `respond: "last_node"` answer it; `shown` false
 * when the caller may not see the run's data (it acted with rights the caller does not hold).
 */
export const runResultOf = (executionId: number, result: RunGraphResult, shown = true) => ({
  execution_id: executionId,
  status: result.status,
  output: shown ? (result.lastOutput ?? null) : null,
  error: shown ? (result.error ?? null) : withheldError(result.error ?? null),
  redacted: !shown,
});
