import type { EntityDefinition, FieldDefinition } from './entity-definition.js';

/** JSON Schema (draft 2020-12) of an entity's records; record writes are validated against it. */

export type JsonSchema = Record<string, unknown>;

export const DRAFT_2020_12 = 'https://json-schema.org/draft/2020-12/schema';

/** Integers are stored as bigint but travel as JSON numbers: only the exactly representable ones. */
const SAFE_MIN = Number.MIN_SAFE_INTEGER;
const SAFE_MAX = Number.MAX_SAFE_INTEGER;

function valueSchema(field: FieldDefinition): JsonSchema {
  switch (field.type) {
    case 'string':
      return { type: 'string', ...(field.max_length !== undefined ? { maxLength: field.max_length } : {}), ...(field.format ? { format: field.format } : {}) };
    case 'integer':
      return { type: 'integer', minimum: Math.max(field.min ?? SAFE_MIN, SAFE_MIN), maximum: Math.min(field.max ?? SAFE_MAX, SAFE_MAX) };
    case 'number':
      return { type: 'number', ...(field.min !== undefined ? { minimum: field.min } : {}), ...(field.max !== undefined ? { maximum: field.max } : {}) };
    case 'boolean':
      return { type: 'boolean' };
    case 'enum':
      return { enum: [...field.values] };
    case 'date':
      return { type: 'string', format: 'date' };
    case 'datetime':
      return { type: 'string', format: 'date-time' };
    case 'json':
      return {};
    case 'relation':
      return { type: 'string', format: 'uuid', description: `uuid of a ${field.entity} record` };
    case 'uuid':
      return { type: 'string', format: 'uuid' };
  }
}

/** Optional fields also accept null, which clears them. */
function nullable(schema: JsonSchema): JsonSchema {
  if (Array.isArray(schema.enum)) return { ...schema, enum: [...schema.enum, null] };
  if (typeof schema.type === 'string') return { ...schema, type: [schema.type, 'null'] };
  return schema;
}

function fieldSchema(field: FieldDefinition): JsonSchema {
  const base = valueSchema(field);
  const schema = field.required ? base : nullable(base);
  return {
    ...(field.label ? { title: field.label } : {}),
    ...(field.description && !schema.description ? { description: field.description } : {}),
    ...schema,
    ...('default' in field && field.default !== undefined ? { default: field.default } : {}),
  };
}

/**
 * The schema of a record. `uuid`, `created_at` and `updated_at` are listed read-only (writes that
 * send them are refused by the record service); `required` lists required fields without a
 * default. `partial` drops `required`, for PATCH.
 */
export function recordJsonSchema(def: EntityDefinition, options: { partial?: boolean; id?: string } = {}): JsonSchema {
  const properties: Record<string, JsonSchema> = {
    uuid: { type: 'string', format: 'uuid', readOnly: true },
    created_at: { type: 'string', format: 'date-time', readOnly: true },
    updated_at: { type: 'string', format: 'date-time', readOnly: true },
  };
  const required: string[] = [];
  for (const [name, field] of Object.entries(def.schema.fields)) {
    properties[name] = fieldSchema(field);
    if (field.required && !('default' in field && field.default !== undefined)) required.push(name);
  }
  return {
    $schema: DRAFT_2020_12,
    ...(options.id ? { $id: options.id } : {}),
    title: def.name,
    type: 'object',
    properties,
    ...(options.partial || required.length === 0 ? {} : { required }),
    additionalProperties: false,
  };
}
