import { z } from 'zod';
import type { NodeType } from './node-type.js';

const entity = z.string().min(1).max(63);

/**
 * Record nodes act with the rights of the people the run acts for (see NodeRunContext.actor), as
 * the records API would for them; a refusal or a validation error fails the node without retrying.
 */
export const recordCreateNode: NodeType<{ entity: string; fields: Record<string, unknown> }> = {
  type: 'record_create',
  pure: false,
  description:
    'config `{entity, fields}`: creates a record of the entity from the evaluated field map. Output: the created record (only `{uuid}` when the run’s people may not view the entity’s records).',
  configSchema: z.strictObject({ entity, fields: z.record(z.string(), z.unknown()) }),
  run: async ({ config, records, actor }) => ({ output: await records.create(await actor(), config.entity, config.fields) }),
};

export const recordUpdateNode: NodeType<{ entity: string; uuid: string; fields: Record<string, unknown> }> = {
  type: 'record_update',
  pure: false,
  description:
    'config `{entity, uuid, fields}`: updates those fields of the record. Output: the updated record (only `{uuid}` when the run’s people may not view the entity’s records).',
  configSchema: z.strictObject({ entity, uuid: z.string().min(1), fields: z.record(z.string(), z.unknown()) }),
  resolvedSchema: z.object({ entity, uuid: z.uuid(), fields: z.record(z.string(), z.unknown()) }),
  run: async ({ config, records, actor }) => ({ output: await records.update(await actor(), config.entity, config.uuid, config.fields) }),
};

export const recordQueryNode: NodeType<{ entity: string; eql?: string; sort?: string; per_page?: number; page?: number }> = {
  type: 'record_query',
  pure: false,
  description:
    'config `{entity, eql?, sort?, per_page? (max 200), page?}`: lists records as `GET /records/{entity}` does. Output `{items, total, page, per_page}`.',
  configSchema: z.strictObject({
    entity,
    eql: z.string().max(2000).optional(),
    sort: z.string().max(500).optional(),
    per_page: z.union([z.number().int().min(1).max(200), z.string()]).optional(),
    page: z.union([z.number().int().min(1), z.string()]).optional(),
  }),
  resolvedSchema: z.object({
    entity,
    eql: z.string().max(2000).optional(),
    sort: z.string().max(500).optional(),
    per_page: z.coerce.number().int().min(1).max(200).optional(),
    page: z.coerce.number().int().min(1).max(1_000_000).optional(),
  }),
  run: async ({ config, records, actor }) => ({
    output: await records.list(await actor(), config.entity, {
      ...(config.eql ? { eql: config.eql } : {}),
      ...(config.sort ? { sort: config.sort } : {}),
      ...(config.per_page ? { perPage: config.per_page } : {}),
      ...(config.page ? { page: config.page } : {}),
    }),
  }),
};
