import { z } from 'zod';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { named } from '../http/openapi.js';
import { definitionPatchSchema, definitionSchema, fieldSchema } from './entity-definition.js';
import { recordJsonSchema } from './json-schema.js';
import type { EntityService } from './entity.service.js';

export const MANAGEMENT_ROOT = '/api/management/v1';

/** Query flags take `true` or `false`; anything else is a 400 naming the parameter. */
export const flag = z
  .enum(['true', 'false'])
  .optional()
  .transform((v) => v === 'true');

export const slugParam = z.string().regex(/^[a-z][a-z0-9_]{0,39}$/, 'not an entity slug');

const entityView = z.object({
  slug: z.string(),
  name: z.string(),
  schema: z.object({ fields: z.record(z.string(), fieldSchema) }),
  form: z.object({ layout: z.array(z.array(z.string())) }),
  lists: z.record(z.string(), z.object({ columns: z.array(z.string()), sort: z.string().optional() })),
  capabilities: z.object({ view: z.string(), create: z.string(), edit: z.string(), delete: z.string() }),
  created_at: z.string(),
  updated_at: z.string(),
});
named(entityView, 'Entity', { description: 'An entity: its fields, form, lists and the capability each action on its records needs' });

const dryRun = z.object({
  changes: z.array(z.object({ kind: z.string(), field: z.string().nullable(), sql: z.string(), destructive: z.boolean() })),
  destructive: z.boolean(),
});

export function entityRoutes({ entities }: { entities: EntityService }): AnyRoute[] {
  const tag = 'entities';
  const manage = { capability: 'svc_manage_entities' } as const;
  const view = { capability: 'svc_view_records' } as const;
  return [
    defineRoute({
      method: 'get',
      path: `${MANAGEMENT_ROOT}/entities`,
      operationId: 'listEntities',
      summary: 'Entities whose records the caller may view, with record counts',
      description: 'Entities whose `view` capability the caller holds, by slug; each with how many records it has.',
      tag,
      access: view,
      query: z.strictObject({
        page: z.coerce.number().int().min(1).max(1_000_000).default(1),
        per_page: z.coerce.number().int().min(1).max(200).default(100),
      }),
      responses: {
        200: {
          description: 'Entities',
          data: z.object({
            items: z.array(z.object({ slug: z.string(), name: z.string(), record_count: z.number().int() })),
            total: z.number().int(),
            page: z.number().int(),
            per_page: z.number().int(),
          }),
        },
      },
      handler: async ({ principal, query }) => ({ data: await entities.list(principal, query.page, query.per_page) }),
    }),
    defineRoute({
      method: 'get',
      path: `${MANAGEMENT_ROOT}/entities/{slug}`,
      operationId: 'getEntity',
      summary: 'The full definition of an entity: schema, form, lists, capabilities',
      description: "Needs the entity's `view` capability (default svc_view_records); without it, 403 naming the capability.",
      tag,
      access: view,
      params: z.object({ slug: slugParam }),
      responses: { 200: { description: 'The entity', data: entityView } },
      handler: async ({ principal, params }) => ({ data: entities.view(await entities.requireFor(principal, params.slug, 'view')) }),
    }),
    defineRoute({
      method: 'get',
      path: `${MANAGEMENT_ROOT}/entities/{slug}/schema`,
      operationId: 'getEntitySchema',
      summary: "JSON Schema (draft 2020-12) of the entity's records; record writes are validated against it",
      description:
        'The schema of a record as the records API reads and writes it, generated from the field definitions (types, required fields, formats, bounds, enum values).',
      tag,
      access: view,
      params: z.object({ slug: slugParam }),
      responses: { 200: { description: 'A JSON Schema', data: z.record(z.string(), z.unknown()) } },
      handler: async ({ principal, params }) => {
        const entity = await entities.requireFor(principal, params.slug, 'view');
        return { data: recordJsonSchema(entity.definition, { id: `${MANAGEMENT_ROOT}/entities/${params.slug}/schema` }) };
      },
    }),
    defineRoute({
      method: 'post',
      path: `${MANAGEMENT_ROOT}/entities`,
      operationId: 'createEntity',
      summary: 'Creates an entity and its table',
      description:
        'Field names are lower-case identifiers; relations name an existing entity. Unset parts get defaults: an empty form layout, no lists, and the capabilities svc_view_records, svc_create_records, svc_edit_records and svc_delete_records. Every problem is listed in one 400 `validation_failed`.',
      tag,
      access: manage,
      body: definitionSchema,
      errors: { conflict: 'An entity with this slug exists' },
      responses: { 201: { description: 'Created', data: entityView } },
      handler: async ({ body }) => ({ status: 201, data: await entities.create(body) }),
    }),
    defineRoute({
      method: 'patch',
      path: `${MANAGEMENT_ROOT}/entities/{slug}`,
      operationId: 'updateEntity',
      summary: 'Changes an entity; the reconciler plan is returned as dry_run',
      description:
        '`schema.fields` merges field by field (an object replaces the field, null removes it); `name`, `form`, `lists` and ' +
        '`capabilities` replace their current value. The plan runs in one transaction. `dry_run=true` applies nothing; ' +
        'destructive plans need `allow_destructive=true`.',
      tag,
      access: manage,
      params: z.object({ slug: slugParam }),
      query: z.strictObject({ dry_run: flag, allow_destructive: flag }),
      body: definitionPatchSchema,
      errors: {
        destructive_change: 'The change loses data: it needs allow_destructive (plan in data.dry_run)',
        unsupported_change: 'No safe cast of stored values (in data.refusals)',
        change_refused: 'Existing records prevent a change (counted in data.records)',
      },
      responses: {
        200: {
          description: 'The entity (changed unless a dry run) and the plan',
          data: z.object({ entity: entityView, dry_run: dryRun, applied: z.boolean() }),
        },
      },
      handler: async ({ params, query, body }) => ({
        data: await entities.update(params.slug, body, { dryRun: query.dry_run, allowDestructive: query.allow_destructive }),
      }),
    }),
    defineRoute({
      method: 'delete',
      path: `${MANAGEMENT_ROOT}/entities/{slug}`,
      operationId: 'deleteEntity',
      summary: 'Deletes an entity and its records',
      description:
        "Refused with 409 `entity_protected` while other entities' relations point at it. With `force=true` those relation " +
        'fields become plain `uuid` fields (their values stay, the foreign keys go) and the entity is deleted.',
      tag,
      access: manage,
      params: z.object({ slug: slugParam }),
      query: z.strictObject({ force: flag }),
      errors: { entity_protected: 'Relations point at the entity (listed in data.entities)' },
      responses: {
        200: {
          description: 'Deleted',
          data: z.object({ slug: z.string(), deleted: z.literal(true), detached: z.array(z.object({ entity: z.string(), field: z.string() })) }),
        },
      },
      handler: async ({ params, query }) => ({ data: await entities.remove(params.slug, query.force) }),
    }),
  ];
}
