import { z } from 'zod';
import { named } from '../http/openapi.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import type { EventService } from './event.service.js';
import { MAX_EVENT_DATA_BYTES, eventKey, eventName } from './event.limits.js';

const sent = named(
  z.object({
    event_id: z.number().int(),
    delivered: z.array(z.number().int()).describe('The executions whose waiting wait_for_event node this event resumed'),
  }),
  'SentEvent',
  { description: 'An event as stored, and the runs it resumed', examples: [{ event_id: 12, delivered: [42] }] },
);

/** Sending events to the runs that wait for them. */
export function eventRoutes({ events }: { events: EventService }): AnyRoute[] {
  return [
    defineRoute({
      method: 'post',
      path: '/api/workflow/v1/events',
      operationId: 'sendEvent',
      summary: 'Sends an event: every run waiting for its name and key resumes, as far as the caller may see its workflow',
      description: `Resumes each running wait_for_event node waiting for \`name\` and \`key\` whose workflow the caller may see (owner, shared with, or administrator); runs of other workflows are never reached. The event is kept for 24 hours, so a wait that begins after it, within its own \`lookback_ms\` (default 10 minutes), takes it too: an event that arrives a moment before the run reaches its wait is not lost. \`data\` (any JSON, at most ${MAX_EVENT_DATA_BYTES} bytes) is what the waiting node outputs.`,
      tag: 'waits',
      access: { capability: 'svc_manage_workflows' },
      body: named(z.strictObject({ name: eventName, key: eventKey, data: z.unknown().optional() }), 'EventToSend', {
        description: 'An event: its name, correlation key and data',
        examples: [{ name: 'payment.received', key: 'order-1001', data: { amount: 49.9, currency: 'EUR' } }],
      }),
      responses: { 200: { description: 'The event, and the runs it resumed', data: sent } },
      handler: async ({ body, principal }) => ({ data: await events.send([principal.id], { name: body.name, key: body.key, data: body.data }, 'api') }),
    }),
  ];
}
