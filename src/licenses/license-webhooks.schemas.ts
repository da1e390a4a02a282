import { z } from 'zod';
import { named } from '../http/openapi.js';
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

named(createWebhookBody, 'LicenceWebhookCreate', {
  description: 'A URL to POST licence events to',
  examples: [{ url: 'https://vendor.example.com/hooks/licences', events: ['license.activated', 'license.deactivated'], description: 'CRM sync' }],
});

export const updateWebhookBody = z
  .strictObject({ url: url.optional(), events: events.optional(), description: description.optional(), active: z.boolean().optional() })
  .refine((body) => Object.keys(body).length > 0, { message: 'give at least one of url, events, description, active' });

named(updateWebhookBody, 'LicenceWebhookUpdate', { description: 'Any of url, events, description and active', examples: [{ active: false }] });

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

named(webhookView, 'LicenceWebhook', { description: 'A vendor webhook (never its secret)' });

export const createdWebhookView = webhookView.extend({
  secret: z.string().describe('The signing secret (`whsec_…`); shown only here'),
});

named(createdWebhookView, 'CreatedLicenceWebhook', { description: 'A webhook just created, with its signing secret (shown only here)' });

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

named(deliveryView, 'LicenceWebhookDelivery', { description: 'One event sent to one webhook, with every attempt' });

export { pageOf };
