import { z } from 'zod';
import { DEFAULT_LOOKBACK_MS, MAX_LOOKBACK_MS, eventName, resolvedEventKey } from '../events/event.limits.js';
import type { NodeType } from './node-type.js';

const MAX_WAIT_MS = 366 * 24 * 3600 * 1000;

/**
 * Waits in the workflow for an event of a name and correlation key (sent with POST /events or by
 * an emit_event node), or its timeout: a signal raced against a durable timer
 * (workflows/wait-for-event.ts). An event sent within `lookback_ms` before the wait began counts.
 */
export const waitForEventNode: NodeType<{ event: string; key: string; timeout_ms: number; lookback_ms: number }> = {
  type: 'wait_for_event',
  pure: false,
  runsAs: 'wait',
  description: `config \`{event, key, timeout_ms, lookback_ms?}\` (\`key\` usually an expression such as \`{{ trigger.order_id }}\`; \`timeout_ms\` 1 ms to 366 days; \`lookback_ms\` 0 to 24 h, default 10 min): waits for the event of that name and key, or the timeout. Edges carry \`branch: "received"\` or \`"timeout"\`. Output \`{event: {name, key, data, sent_at, received_at}, branch: "received"}\` or \`{timed_out: true, branch: "timeout"}\`.`,
  configSchema: z.strictObject({
    event: eventName,
    key: z.string().min(1).max(2000),
    timeout_ms: z.number().int().min(1).max(MAX_WAIT_MS),
    lookback_ms: z.number().int().min(0).max(MAX_LOOKBACK_MS).default(DEFAULT_LOOKBACK_MS),
  }),
  resolvedSchema: z.object({
    event: eventName,
    key: resolvedEventKey,
    timeout_ms: z.number().int().min(1).max(MAX_WAIT_MS),
    lookback_ms: z.number().int().min(0).max(MAX_LOOKBACK_MS).default(DEFAULT_LOOKBACK_MS),
  }),
  branches: () => ['received', 'timeout'],
};
