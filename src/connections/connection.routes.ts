import { z } from 'zod';
import { named } from '../http/openapi.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { idParam, queryBoolean } from '../http/pagination.js';
import { AppError } from '../platform/errors.js';
import { connectionTypes } from './connection.types.js';
import { probe } from './probe.js';
import type { Config } from '../config.js';
import type { ConnectionService } from './connection.service.js';

const root = '/api/workflow/v1/connections';
const manage = { capability: 'svc_manage_connections' } as const;
const extra = z
  .looseObject({
    base_url: z.url({ protocol: /^https?$/, error: 'an http(s) URL' }).max(2000),
    header_name: z
      .string()
      .regex(/^[A-Za-z0-9-]{1,100}$/)
      .optional(),
  })
  .describe('`base_url` of the service; `header_name` for http_header connections (default X-API-Key)');
const sharedWith = z
  .array(z.number().int().positive().max(2_147_483_647))
  .max(500)
  .describe('Users besides the owner who may use the connection in their workflows and agent sessions (administrators may use every connection)');
const view = z.object({
  id: z.number().int(),
  type: z.enum(connectionTypes),
  label: z.string(),
  cred_preview: z.string(),
  extra: z.record(z.string(), z.unknown()),
  owner: z.object({ id: z.number().int(), login: z.string() }),
  shared_with: z.array(z.number().int()),
  created_at: z.string(),
  updated_at: z.string(),
});
named(view, 'Connection', {
  description: 'A stored credential, masked',
  examples: [
    {
      id: 1,
      type: 'http_bearer',
      label: 'CRM API',
      cred_preview: 'sk-…a1b2',
      extra: { base_url: 'https://crm.example.com/api' },
      owner: { id: 1, login: 'admin' },
      shared_with: [2],
      created_at: '2025-01-01T12:00:00.000Z',
      updated_at: '2025-01-01T12:00:00.000Z',
    },
  ],
});

export function connectionRoutes({ connections, config }: { connections: ConnectionService; config: Config }): AnyRoute[] {
  return [
    defineRoute({
      method: 'get',
      path: root,
      operationId: 'listConnections',
      summary: 'Connections, credentials masked: all of them for those who manage connections, otherwise those the caller may use',
      description:
        'A connection is usable by its owner, the users in its `shared_with`, and administrators. Editors see here the ones they may name in a node or an agent session.',
      tag: 'connections',
      access: { capability: 'svc_manage_workflows' },
      responses: { 200: { description: 'Connections', data: z.object({ items: z.array(view) }) } },
      handler: async ({ principal }) => ({ data: { items: await connections.list(principal) } }),
    }),
    defineRoute({
      method: 'post',
      path: root,
      operationId: 'createConnection',
      summary: 'Stores a credential, encrypted at write time; only a masked preview is ever returned',
      description:
        "`type` says how the credential is sent: `http_bearer` (Authorization: Bearer), `http_basic` (`user:password`), `http_header` (in `extra.header_name`, default X-API-Key), `openai` or `anthropic` (model providers for llm_prompt nodes and agent sessions). The credential goes to `extra.base_url`'s origin only. The caller owns the connection; `shared_with` names the users who may use it too.",
      tag: 'connections',
      access: manage,
      body: z.strictObject({
        type: z.enum(connectionTypes),
        label: z.string().trim().min(1).max(200),
        cred: z.string().min(1).max(10_000),
        extra,
        shared_with: sharedWith.optional(),
      }),
      responses: { 201: { description: 'Created', data: view } },
      handler: async ({ body, principal }) => ({ status: 201, data: await connections.create({ ...body, extra: body.extra as never }, principal.id) }),
    }),
    defineRoute({
      method: 'patch',
      path: `${root}/{id}`,
      operationId: 'updateConnection',
      summary: 'Relabels a connection, changes its extra settings, rotates its credential or changes whom it is shared with',
      description:
        'Fields left out keep their value; `extra` replaces the whole object. Only the owner of the connection or an administrator changes `shared_with` (403 otherwise).',
      tag: 'connections',
      access: manage,
      params: idParam,
      body: z.strictObject({
        label: z.string().trim().min(1).max(200).optional(),
        cred: z.string().min(1).max(10_000).optional(),
        extra: extra.optional(),
        shared_with: sharedWith.optional(),
      }),
      responses: { 200: { description: 'Updated', data: view } },
      handler: async ({ params, body, principal }) => ({ data: await connections.update(principal, params.id, { ...body, extra: body.extra as never }) }),
    }),
    defineRoute({
      method: 'post',
      path: `${root}/{id}/test`,
      operationId: 'testConnection',
      summary: 'Sends a probe with the credential applied (GET base_url; for openai GET /models)',
      description:
        'Answers 200 with the status the target answered when it is below 400; otherwise 422 `probe_failed` with the reason (a refused credential, an error status, no answer within SVC_PROBE_TIMEOUT_MS). A target the egress policy refuses is never contacted (422 `egress_denied`).',
      tag: 'connections',
      access: manage,
      params: idParam,
      errors: {
        probe_failed: 'The probe failed; `data.error` says why',
        egress_denied: 'The egress policy refused its target and nothing was sent; `data.error` says why',
        credential_unreadable: 'The credential was sealed with an encryption key this service no longer has (SVC_PREVIOUS_ENCRYPTION_KEYS)',
      },
      responses: { 200: { description: 'The probe passed', data: z.object({ probe_status: z.number().int() }) } },
      handler: async ({ params }) => {
        await connections.get(params.id);
        const result = await probe(await connections.resolve(params.id), config.SVC_PROBE_TIMEOUT_MS);
        if (result.denied) throw new AppError('egress_denied', `The egress policy refused the target: ${result.error}`, { error: result.error });
        if (!result.ok)
          throw new AppError('probe_failed', `The probe failed: ${result.error}`, {
            error: result.error,
            ...(result.status ? { probe_status: result.status } : {}),
          });
        return { data: { probe_status: result.status! } };
      },
    }),
    defineRoute({
      method: 'delete',
      path: `${root}/{id}`,
      operationId: 'deleteConnection',
      summary: 'Deletes a connection; refused while an active workflow uses it unless force=true',
      description: 'After a forced delete, the workflows that used it fail at their next run with the node error `connection_missing`.',
      tag: 'connections',
      access: manage,
      params: idParam,
      query: z.strictObject({ force: queryBoolean.optional() }),
      errors: { connection_in_use: 'Used by active workflows; `data.workflows` lists them' },
      responses: {
        200: {
          description: 'Deleted',
          data: z.object({
            id: z.number().int(),
            deleted: z.literal(true),
            workflows: z.array(z.object({ id: z.number().int(), slug: z.string(), title: z.string() })),
          }),
        },
      },
      handler: async ({ params, query }) => ({ data: await connections.delete(params.id, query.force ?? false) }),
    }),
  ];
}
