import { z } from 'zod';
import { pageOf, pagination } from '../http/pagination.js';

/** The licence events a vendor webhook can subscribe to. */
export const licenseEvents = ['license.activated', 'license.deactivated', 'license.limit_reached', 'license.status_changed'] as const;
export type LicenseEvent = (typeof licenseEvents)[number];

export const deliveryStatuses = ['pending', 'delivered', 'failed'] as const;

const url = z
  .url({ protocol: /^https?$/, error: 'an http(s) URL' })
  .max(2000)
  .describe('Where events are POSTed');
const events = z
  .array(z.enum(licenseEvents))
  .min(1)
  .max(licenseEvents.length * 4)
  .transform((list) => [...new Set(list)])
  .describe('The events this webhook receives');
const description = z.string().trim().max(500).nullable().describe('A note for the vendor');

export const createWebhookBody = z.strictObject({
  url,
  events: events.default([...licenseEvents]),
  description: description.optional(),
  active: z.boolean().default(true),
});

export const updateWebhookBody = z
  .strictObject({ url: url.optional(), events: events.optional(), description: description.optional(), active: z.boolean().optional() })
  .refine((body) => Object.keys(body).length > 0, { message: 'give at least one of url, events, description, active' });

export const listWebhooksQuery = z.strictObject(pagination(100));
export const listDeliveriesQuery = z.strictObject({ status: z.enum(deliveryStatuses).optional(), ...pagination(100) });

export const webhookView = z.object({
  id: z.number().int(),
  url: z.string(),
  events: z.array(z.enum(licenseEvents)),
  description: z.string().nullable(),
  active: z.boolean(),
  secret_hint: z.string().describe('Last four characters of the signing secret'),
  created_at: z.string(),
  updated_at: z.string(),
});

export const createdWebhookView = webhookView.extend({
  secret: z.string().describe('The signing secret (`whsec_…`); shown only here'),
});

export const deliveryView = z.object({
  id: z.string(),
  event_id: z.string().describe('The same for every webhook the event was delivered to'),
  event: z.enum(licenseEvents),
  status: z.enum(deliveryStatuses),
  attempt_count: z.number().int(),
  last_status: z.number().int().nullable().describe('HTTP status of the last attempt; null when it got no answer'),
  last_error: z.string().nullable(),
  created_at: z.string(),
  finished_at: z.string().nullable(),
  payload: z.record(z.string(), z.unknown()).describe('The JSON body POSTed: `{id, type, created_at, data}`'),
  attempts: z.array(
    z.object({
      attempt: z.number().int(),
      started_at: z.string(),
      duration_ms: z.number().int(),
      response_status: z.number().int().nullable(),
      error: z.string().nullable(),
    }),
  ),
});

export { pageOf };
