import { z } from 'zod';
import { paramNames, unusedParams } from '../records/eql.compiler.js';
import { parseEql } from '../records/eql.parser.js';
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

/** What a `:name` parameter may be given: a JSON value (checked against its field when the filter runs). */
const params = z.record(z.string(), z.unknown());
const PARAM_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The EQL of a stored record_query, checked when the workflow is saved when it holds no `{{ }}`:
 * it parses, every `:name` it uses has a value in `params`, and every value is used.
 */
function checkEqlParams(config: { eql?: unknown; params?: unknown }, ctx: z.RefinementCtx): void {
  if (typeof config.eql !== 'string' || !config.eql.trim()) {
    for (const name of Object.keys((config.params ?? {}) as object))
      ctx.addIssue({ code: 'custom', path: ['params', name], message: 'is given but there is no eql' });
    return;
  }
  // An eql built by an expression is known only when the node runs (and checked then).
  if (config.eql.includes('{{')) return;
  let tree;
  try {
    tree = parseEql(config.eql);
  } catch (err) {
    ctx.addIssue({ code: 'custom', path: ['eql'], message: (err as Error).message });
    return;
  }
  const given = (config.params ?? {}) as Record<string, unknown>;
  for (const name of Object.keys(given)) {
    if (!PARAM_NAME.test(name))
      ctx.addIssue({ code: 'custom', path: ['params', name], message: 'is not a parameter name (a letter or _, then letters, digits or _)' });
  }
  for (const name of paramNames(tree)) {
    if (!Object.hasOwn(given, name)) ctx.addIssue({ code: 'custom', path: ['params'], message: `has no value for the parameter :${name} the eql uses` });
  }
  for (const problem of unusedParams(tree, given)) ctx.addIssue({ code: 'custom', path: problem.field.split('.'), message: problem.message });
}

export const recordQueryNode: NodeType<{ entity: string; eql?: string; params?: Record<string, unknown>; sort?: string; per_page?: number; page?: number }> = {
  type: 'record_query',
  pure: false,
  description:
    'config `{entity, eql?, params?, sort?, per_page? (max 200), page?}`: lists records as `GET /records/{entity}` does. `eql` names values as `:name` parameters (`order_id = :order_id`) and `params` gives them (`{"order_id": "{{ trigger.order_id }}"}`): each is bound as one value, never spliced into the filter text. Output `{items, total, page, per_page}`.',
  configSchema: z
    .strictObject({
      entity,
      eql: z.string().max(2000).optional(),
      params: params.optional(),
      sort: z.string().max(500).optional(),
      per_page: z.union([z.number().int().min(1).max(200), z.string()]).optional(),
      page: z.union([z.number().int().min(1), z.string()]).optional(),
    })
    .superRefine(checkEqlParams),
  resolvedSchema: z.object({
    entity,
    eql: z.string().max(2000).optional(),
    params: params.optional(),
    sort: z.string().max(500).optional(),
    per_page: z.coerce.number().int().min(1).max(200).optional(),
    page: z.coerce.number().int().min(1).max(1_000_000).optional(),
  }),
  run: async ({ config, records, actor }) => ({
    output: await records.list(await actor(), config.entity, {
      ...(config.eql ? { eql: config.eql } : {}),
      ...(config.params ? { params: config.params } : {}),
      ...(config.sort ? { sort: config.sort } : {}),
      ...(config.per_page ? { perPage: config.per_page } : {}),
      ...(config.page ? { page: config.page } : {}),
    }),
  }),
};
