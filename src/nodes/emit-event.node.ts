import { ApplicationFailure } from '@temporalio/activity';
import { z } from 'zod';
import { eventName, resolvedEventKey } from '../events/event.limits.js';
import type { NodeType } from './node-type.js';
import { CODE } from '../../workflows/error-codes.js';

/**
 * Sends an event, as POST /events would for the people the run acts for: it reaches only runs of
 * workflows all of them may see, and they must hold svc_manage_workflows together. Sent once per
 * run and node however often the activity is retried.
 */
export const emitEventNode: NodeType<{ event: string; key: string; data?: unknown }> = {
  type: 'emit_event',
  pure: false,
  description:
    'config `{event, key, data?}` (`key` and `data` may hold expressions): sends the event as the people the run acts for, resuming the runs that wait for it (their workflows visible to all of those people). Output `{event_id, delivered: [execution ids]}`.',
  configSchema: z.strictObject({ event: eventName, key: z.string().min(1).max(2000), data: z.unknown().optional() }),
  resolvedSchema: z.object({ event: eventName, key: resolvedEventKey, data: z.unknown().optional() }),
  run: async ({ config, execution, node, events, actor }) => {
    if (!(await actor()).can('svc_manage_workflows')) {
      throw ApplicationFailure.nonRetryable('Sending an event needs svc_manage_workflows, which a person this run acts for lacks', CODE.forbidden);
    }
    const sent = await events.send(
      execution.actingUserIds,
      { name: config.event, key: config.key, data: config.data ?? null },
      'node',
      `execution:${execution.id}:${node.id}`,
    );
    return { output: sent };
  },
};
