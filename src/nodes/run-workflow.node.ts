import { z } from 'zod';
import type { NodeType } from './node-type.js';

/** Runs another stored workflow as a Temporal child workflow and waits for it. */
export const runWorkflowNode: NodeType<{ workflow_id: number; payload?: unknown }> = {
  type: 'run_workflow',
  pure: false,
  runsAs: 'child',
  description:
    'config `{workflow_id, payload?}`: runs that workflow (its current version) as a child run with the evaluated payload and waits. Output `{execution_id, status, output}`; a failed child fails the node.',
  configSchema: z.strictObject({ workflow_id: z.number().int().positive().max(2_147_483_647), payload: z.unknown().optional() }),
};
