import { z } from 'zod';
import { idParam } from '../http/pagination.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import {
  createWebhookBody,
  createdWebhookView,
  deliveryView,
  listDeliveriesQuery,
  listWebhooksQuery,
  pageOf,
  updateWebhookBody,
  webhookView,
} from './license-webhooks.schemas.js';
import type { LicenseWebhookService } from './license-webhooks.service.js';

const root = '/api/management/v1/licence-webhooks';

/** Vendor webhooks on licence events; every route needs svc_manage_licenses. */
export function licenseWebhookRoutes({ licenseWebhooks }: { licenseWebhooks: LicenseWebhookService }): AnyRoute[] {
  const common = { tag: 'licence-webhooks', access: { capability: 'svc_manage_licenses' } } as const;
  return [
    defineRoute({
      ...common,
      method: 'post',
      path: root,
      operationId: 'createLicenceWebhook',
      summary: 'Subscribes a URL to licence events; the signing secret is in this response only',
      description:
        'Events: `license.activated`, `license.deactivated`, `license.limit_reached`, `license.status_changed` (all when `events` is omitted). Each delivery is a POST of `{id, type, created_at, data}` with `Svc-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>" under the secret>`, retried with backoff until a 2xx answer.',
      body: createWebhookBody,
      responses: { 201: { description: 'Created, with its secret', data: createdWebhookView } },
      handler: async ({ body }) => ({ status: 201, data: await licenseWebhooks.create(body) }),
    }),
    defineRoute({
      ...common,
      method: 'get',
      path: root,
      operationId: 'listLicenceWebhooks',
      summary: 'Lists licence webhooks, newest first',
      description: 'Each with the events it receives and the last four characters of its secret.',
      query: listWebhooksQuery,
      responses: { 200: { description: 'A page of webhooks', data: pageOf(webhookView) } },
      handler: async ({ query }) => ({ data: await licenseWebhooks.list(query) }),
    }),
    defineRoute({
      ...common,
      method: 'get',
      path: `${root}/{id}`,
      operationId: 'getLicenceWebhook',
      summary: 'One licence webhook (without its secret)',
      description: 'The secret is shown only when the webhook is created.',
      params: idParam,
      responses: { 200: { description: 'The webhook', data: webhookView } },
      handler: async ({ params }) => ({ data: await licenseWebhooks.get(params.id) }),
    }),
    defineRoute({
      ...common,
      method: 'patch',
      path: `${root}/{id}`,
      operationId: 'updateLicenceWebhook',
      summary: 'Changes the URL, the events, the description or whether the webhook is active',
      description: 'An inactive webhook gets no new deliveries, and its pending ones fail at their next attempt.',
      params: idParam,
      body: updateWebhookBody,
      responses: { 200: { description: 'The updated webhook', data: webhookView } },
      handler: async ({ params, body }) => ({ data: await licenseWebhooks.update(params.id, body) }),
    }),
    defineRoute({
      ...common,
      method: 'delete',
      path: `${root}/{id}`,
      operationId: 'deleteLicenceWebhook',
      summary: 'Deletes a licence webhook with its delivery records',
      description: 'Its delivery records are deleted with it, pending ones included; events already delivered stay delivered.',
      params: idParam,
      responses: { 200: { description: 'Deleted', data: z.object({ id: z.number().int(), deleted: z.literal(true) }) } },
      handler: async ({ params }) => ({ data: await licenseWebhooks.delete(params.id) }),
    }),
    defineRoute({
      ...common,
      method: 'get',
      path: `${root}/{id}/deliveries`,
      operationId: 'listLicenceWebhookDeliveries',
      summary: "The webhook's deliveries, newest first, each with its attempts",
      description: 'Filtered by status (`pending`, `delivered`, `failed`); each delivery has the payload sent and every attempt with its HTTP status or error.',
      params: idParam,
      query: listDeliveriesQuery,
      responses: { 200: { description: 'A page of deliveries', data: pageOf(deliveryView) } },
      handler: async ({ params, query }) => ({ data: await licenseWebhooks.deliveries(params.id, query) }),
    }),
  ];
}
