import { z } from 'zod';
import { named } from '../http/openapi.js';
import { defineRoute, type AnyRoute, type RouteErrors } from '../http/route.js';
import { MANAGEMENT_ROOT, slugParam } from './entity.routes.js';
import { bulkOperationSchema, MAX_BULK_OPERATIONS, uuidPattern } from './record-bulk.js';
import { DEFAULT_PER_PAGE, MAX_PER_PAGE } from './record.service.js';
import type { RecordService } from './record.service.js';
import { parseBoundedJson } from '../platform/json-depth.js';
import { validationFailed } from '../platform/errors.js';

const record = z.object({ uuid: z.string() }).catchall(z.unknown());
named(record, 'EntityRecord', {
  description: "A record: its uuid, its fields as the entity's JSON Schema describes them (GET /entities/{slug}/schema), created_at and updated_at",
  examples: [
    {
      uuid: '0b7e9c1a-3f2d-4e5b-8a6c-1d2e3f4a5b6c',
      name: 'Ada Lovelace',
      stage: 'new',
      created_at: '2025-01-01T12:00:00.000Z',
      updated_at: '2025-01-01T12:00:00.000Z',
    },
  ],
});
const fieldMap = z.record(z.string(), z.unknown());
const entityParams = z.object({ entity: slugParam });
const recordParams = z.object({ entity: slugParam, uuid: z.string().regex(uuidPattern, 'not a UUID') });

const fields = z.string().max(2000).optional().describe('comma-separated fields to return; uuid is always included');
const include = z.string().max(2000).optional().describe('comma-separated relation fields to replace by the related record');

// Capabilities are per entity (defaults svc_view_records, svc_create_records, svc_edit_records,
// svc_delete_records), so access is checked by the service and documented here.
const recordErrors = {
  forbidden: 'Missing the capability the entity names for this action (named in data.capability)',
  entity_changed: 'The entity definition changed during the request; retry it',
} satisfies RouteErrors;

/** The `params` query parameter: a JSON object (its values are checked against their fields by the EQL compiler). */
function eqlParams(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = parseBoundedJson(text);
  } catch (err) {
    throw validationFailed([{ field: 'params', message: `is not JSON: ${(err as Error).message}` }]);
  }
  if (!value || typeof value !== 'object' || Array.isArray(value))
    throw validationFailed([{ field: 'params', message: 'must be a JSON object of parameter values' }]);
  return value as Record<string, unknown>;
}

export function recordRoutes({ records }: { records: RecordService }): AnyRoute[] {
  const tag = 'records';
  const base = `${MANAGEMENT_ROOT}/records/{entity}`;
  return [
    defineRoute({
      method: 'get',
      path: base,
      operationId: 'listRecords',
      summary: 'Lists records, filtered with EQL, sorted, paginated',
      description:
        "Capability: the entity's `view` (default svc_view_records). EQL errors are 400 `invalid_eql` with data.position (a `:name` without a value in `params` too); an entry of `params` the filter does not use is 400 `validation_failed` naming `params.<name>`.",
      tag,
      access: 'authenticated',
      params: entityParams,
      query: z.strictObject({
        // A query string past 16 KiB is refused by Node's HTTP parser before any route sees it (431, no
        // envelope): a filter and its parameters stay well under that, as the record_query node's do.
        eql: z
          .string()
          .max(6000)
          .optional()
          .describe("filter expression, e.g. `stage = 'lead' and company.name ~ 'acme'`, or with parameters `stage = :stage`"),
        params: z
          .string()
          .max(6000)
          .optional()
          .describe(
            'JSON object of the values of the `:name` parameters of `eql`, e.g. `{"stage": "lead"}`: each is bound as one value, never spliced into the filter text (a list stands for its items inside `in (...)`)',
          ),
        sort: z.string().max(500).optional().describe('`field:asc` or `field:desc`, comma-separated'),
        fields,
        include,
        per_page: z.coerce.number().int().min(1).max(MAX_PER_PAGE).default(DEFAULT_PER_PAGE),
        page: z.coerce.number().int().min(1).max(10_000_000).default(1),
      }),
      errors: { ...recordErrors, invalid_eql: 'The filter does not parse or type-check (data.position, data.reason)' },
      responses: {
        200: {
          description: 'A page of records',
          data: z.object({ items: z.array(record), total: z.number().int(), page: z.number().int(), per_page: z.number().int() }),
        },
      },
      handler: async ({ principal, params, query }) => {
        const { params: values, ...rest } = query;
        return {
          data: await records.list(principal, params.entity, {
            ...rest,
            ...(values !== undefined ? { params: eqlParams(values) } : {}),
            perPage: query.per_page,
          }),
        };
      },
    }),
    defineRoute({
      method: 'get',
      path: `${base}/{uuid}`,
      operationId: 'getRecord',
      summary: 'One record',
      description:
        "Capability: the entity's `view` (default svc_view_records). `fields` narrows the answer; `include` replaces relation fields by the related records.",
      tag,
      access: 'authenticated',
      params: recordParams,
      query: z.strictObject({ fields, include }),
      errors: recordErrors,
      responses: { 200: { description: 'The record', data: record } },
      handler: async ({ principal, params, query }) => ({ data: await records.get(principal, params.entity, params.uuid, query) }),
    }),
    defineRoute({
      method: 'post',
      path: base,
      operationId: 'createRecord',
      summary: "Creates a record; the body is validated against the entity's JSON Schema",
      description:
        "Capability: the entity's `create` (default svc_create_records). The body is the field map; unset fields take their default. Every invalid field is named in one 400 `validation_failed`. Answers the record, or only its `uuid` to a caller without the entity's `view`. The new record starts the workflows whose `record` trigger listens to `created`.",
      tag,
      access: 'authenticated',
      params: entityParams,
      body: fieldMap,
      errors: { ...recordErrors, conflict: 'A unique field already has this value (named in data.field)' },
      responses: { 201: { description: 'Created: the record, or `{uuid}` alone without `view`', data: record } },
      handler: async ({ principal, params, body }) => ({ status: 201, data: await records.create(principal, params.entity, body) }),
    }),
    defineRoute({
      method: 'patch',
      path: `${base}/{uuid}`,
      operationId: 'updateRecord',
      summary: 'Changes the given fields of a record (null clears an optional field)',
      description:
        "Capability: the entity's `edit` (default svc_edit_records). Fields left out keep their value. Answers the record, or only its `uuid` to a caller without the entity's `view` (editing is not reading). Starts the workflows listening to `updated` when something changed.",
      tag,
      access: 'authenticated',
      params: recordParams,
      body: fieldMap,
      errors: { ...recordErrors, conflict: 'A unique field already has this value (named in data.field)' },
      responses: { 200: { description: 'The updated record, or `{uuid}` alone without `view`', data: record } },
      handler: async ({ principal, params, body }) => ({ data: await records.update(principal, params.entity, params.uuid, body) }),
    }),
    defineRoute({
      method: 'delete',
      path: `${base}/{uuid}`,
      operationId: 'deleteRecord',
      summary: 'Deletes a record',
      description:
        "Capability: the entity's `delete` (default svc_delete_records). Refused while another entity's relation points at it. Starts the workflows listening to `deleted`.",
      tag,
      access: 'authenticated',
      params: recordParams,
      errors: { ...recordErrors, record_referenced: "Another entity's relation still points at the record" },
      responses: { 200: { description: 'Deleted', data: z.object({ uuid: z.string(), deleted: z.literal(true) }) } },
      handler: async ({ principal, params }) => {
        await records.remove(principal, params.entity, params.uuid);
        return { data: { uuid: params.uuid, deleted: true } };
      },
    }),
    defineRoute({
      method: 'post',
      path: `${base}/_bulk`,
      operationId: 'bulkRecords',
      summary: `Up to ${MAX_BULK_OPERATIONS} creates, updates and deletes in one transaction, each in its own savepoint`,
      description:
        'A failing operation is reported in its result and leaves the others applied. The call needs the capability of every kind of operation it contains.',
      tag,
      access: 'authenticated',
      params: entityParams,
      body: z.array(bulkOperationSchema).min(1).max(MAX_BULK_OPERATIONS),
      errors: recordErrors,
      responses: {
        200: {
          description: 'A result per operation',
          data: z.object({
            results: z.array(
              z.object({
                index: z.number().int(),
                op: z.enum(['create', 'update', 'delete']),
                status: z.enum(['ok', 'error']),
                uuid: z.string().nullable(),
                error: z.object({ code: z.string(), message: z.string(), data: z.record(z.string(), z.unknown()).optional() }).optional(),
              }),
            ),
            ok: z.number().int(),
            failed: z.number().int(),
          }),
        },
      },
      handler: async ({ principal, params, body }) => ({ data: await records.bulk(principal, params.entity, body) }),
    }),
  ];
}
