import { z } from 'zod';
import { MAX_ID } from '../http/pagination.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import {
  activationView,
  createLicenseBody,
  issuedLicenseView,
  licenseView,
  listActivationsQuery,
  listLicensesQuery,
  pageOf,
  updateLicenseBody,
} from './license.schemas.js';
import type { LicenseService } from './license.service.js';

const root = '/api/management/v1/licenses';
const idParams = z.object({ id: z.coerce.number().int().positive().max(MAX_ID) });

/** Issuing and managing licences; every route needs svc_manage_licenses. */
export function licenseAdminRoutes({ licenses }: { licenses: LicenseService }): AnyRoute[] {
  const common = { tag: 'licenses', access: { capability: 'svc_manage_licenses' } } as const;
  return [
    defineRoute({
      ...common,
      method: 'post',
      path: root,
      operationId: 'createLicense',
      summary: 'Issues a licence; the token is in this response only',
      description:
        'The token is the licence key a plugin sends to the portal; the service keeps only a hash and the last four characters. `expires_at` takes ISO 8601, `YYYY-MM-DD HH:MM:SS` (UTC) or a bare date (the end of that day, UTC).',
      body: createLicenseBody,
      responses: { 201: { description: 'Issued', data: issuedLicenseView } },
      handler: async ({ body }) => ({ status: 201, data: await licenses.create(body) }),
    }),
    defineRoute({
      ...common,
      method: 'get',
      path: root,
      operationId: 'listLicenses',
      summary: 'Lists licences, newest first',
      description: 'Filtered by status and product; `q` matches the reference id, the token, or part of the product slug or name.',
      query: listLicensesQuery,
      responses: { 200: { description: 'A page of licences', data: pageOf(licenseView) } },
      handler: async ({ query }) => ({ data: await licenses.list(query) }),
    }),
    defineRoute({
      ...common,
      method: 'get',
      path: `${root}/{id}`,
      operationId: 'getLicense',
      summary: 'One licence (without its token)',
      description: 'With the number of distinct domains it is active on (local development hosts not counted).',
      params: idParams,
      responses: { 200: { description: 'The licence', data: licenseView } },
      handler: async ({ params }) => ({ data: await licenses.get(params.id) }),
    }),
    defineRoute({
      ...common,
      method: 'patch',
      path: `${root}/{id}`,
      operationId: 'updateLicense',
      summary: 'Changes status, expiry or domain limit',
      description:
        'Lowering domain_limit below the domains in use deactivates nothing; new domains are refused until enough sites leave. expires_at null removes the expiry.',
      params: idParams,
      body: updateLicenseBody,
      responses: { 200: { description: 'The updated licence', data: licenseView } },
      handler: async ({ params, body }) => ({ data: await licenses.update(params.id, body) }),
    }),
    defineRoute({
      ...common,
      method: 'get',
      path: `${root}/{id}/activations`,
      operationId: 'listLicenseActivations',
      summary: "The licence's activations, most recently activated first",
      description: 'Every site the licence was activated on, active or deactivated, with the versions it reported.',
      params: idParams,
      query: listActivationsQuery,
      responses: { 200: { description: 'A page of activations', data: pageOf(activationView) } },
      handler: async ({ params, query }) => ({ data: await licenses.activations(params.id, query) }),
    }),
  ];
}
