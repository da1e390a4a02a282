import { z } from 'zod';
import { capabilities } from '../auth/capabilities.js';
import { jsonValue, named } from '../http/openapi.js';
import type { FieldProblem } from '../platform/errors.js';
import { nameProblem, SYSTEM_COLUMNS } from './naming.js';

/**
 * The entity definition (`{slug, name, schema: {fields}}`): the request body of POST /entities, the result of a
 * PATCH merge, and what the `entities` catalogue stores. zod checks the shape; `definitionProblems`
 * checks what zod cannot see (names, references between parts, defaults that fit their field).
 */

const noNul = (s: string) => !s.includes('\u0000');
const text = (max: number) => z.string().min(1).max(max).refine(noNul, 'may not contain NUL');
const datePattern = /^\d{4}-\d{2}-\d{2}$/;
const dateTimePattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$/i;

const common = {
  required: z.boolean().optional(),
  unique: z.boolean().optional(),
  label: text(200).optional(),
  description: z.string().max(2000).optional(),
};

export const fieldSchema = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('string'),
    ...common,
    format: z.literal('email').optional(),
    max_length: z.number().int().min(1).max(1_000_000).optional(),
    default: z.string().max(1_000_000).refine(noNul, 'may not contain NUL').optional(),
  }),
  z.strictObject({
    type: z.literal('integer'),
    ...common,
    min: z.number().int().optional(),
    max: z.number().int().optional(),
    default: z.number().int().optional(),
  }),
  z.strictObject({ type: z.literal('number'), ...common, min: z.number().optional(), max: z.number().optional(), default: z.number().optional() }),
  z.strictObject({ type: z.literal('boolean'), ...common, default: z.boolean().optional() }),
  z.strictObject({
    type: z.literal('enum'),
    ...common,
    values: z.array(text(200)).min(1).max(500),
    default: z.string().optional(),
  }),
  z.strictObject({ type: z.literal('date'), ...common, default: z.string().regex(datePattern, 'expected YYYY-MM-DD').optional() }),
  z.strictObject({
    type: z.literal('datetime'),
    ...common,
    default: z.string().regex(dateTimePattern, 'expected an ISO 8601 date-time with offset').optional(),
  }),
  z.strictObject({ type: z.literal('json'), ...common, default: jsonValue.optional() }),
  z.strictObject({ type: z.literal('relation'), ...common, entity: z.string().min(1).max(40) }),
  z.strictObject({ type: z.literal('uuid'), ...common }),
]);

named(fieldSchema, 'FieldDefinition', { description: 'One field of an entity; `type` decides which settings it takes' });
export type FieldDefinition = z.infer<typeof fieldSchema>;
export type FieldType = FieldDefinition['type'];

/**
 * The field `name` of a field map, or undefined. Names come from callers, so an inherited
 * property (`constructor`, `toString`, `__proto__`) must never pass for a field.
 */
export const fieldNamed = (fields: Record<string, FieldDefinition>, name: string): FieldDefinition | undefined =>
  Object.hasOwn(fields, name) ? fields[name] : undefined;

const capabilityName = z.enum(capabilities);
const formSchema = z.strictObject({ layout: z.array(z.array(z.string()).max(20)).max(200) });
const listsSchema = z.record(z.string(), z.strictObject({ columns: z.array(z.string()).max(200), sort: z.string().max(500).optional() }));
const capabilitiesSchema = z.strictObject({
  view: capabilityName.optional(),
  create: capabilityName.optional(),
  edit: capabilityName.optional(),
  delete: capabilityName.optional(),
});

export const definitionSchema = z.strictObject({
  slug: z.string().min(1).max(40),
  name: text(200),
  schema: z.strictObject({ fields: z.record(z.string(), fieldSchema) }),
  form: formSchema.optional(),
  lists: listsSchema.optional(),
  capabilities: capabilitiesSchema.optional(),
});
named(definitionSchema, 'EntityCreate', {
  description: 'An entity definition: its fields, and optionally its form, lists and the capabilities each action needs',
  examples: [
    {
      slug: 'lead',
      name: 'Lead',
      schema: {
        fields: {
          name: { type: 'string', required: true, max_length: 200 },
          email: { type: 'string', format: 'email', unique: true },
          stage: { type: 'enum', values: ['new', 'won', 'lost'], default: 'new' },
          score: { type: 'integer', min: 0, max: 100 },
        },
      },
      lists: { default: { columns: ['name', 'stage'], sort: 'name:asc' } },
    },
  ],
});

/**
 * Body of PATCH /entities/{slug}. `schema.fields` is merged field by field: an object replaces
 * that field's whole definition, null removes the field, unnamed fields stay. The other parts
 * replace their current value when present. The slug cannot change.
 */
export const definitionPatchSchema = z.strictObject({
  slug: z.string().optional(),
  name: text(200).optional(),
  schema: z.strictObject({ fields: z.record(z.string(), fieldSchema.nullable()) }).optional(),
  form: formSchema.optional(),
  lists: listsSchema.optional(),
  capabilities: capabilitiesSchema.optional(),
});

named(definitionPatchSchema, 'EntityUpdate', {
  description: 'Changes to an entity: `schema.fields` merges field by field (null removes a field), the other parts replace their value',
  examples: [{ schema: { fields: { score: null, phone: { type: 'string', max_length: 40 } } } }],
});

export type DefinitionPatch = z.infer<typeof definitionPatchSchema>;

/** The definition `patch` makes of `current` (see definitionPatchSchema for the rules). */
export function applyPatch(current: EntityDefinition, patch: DefinitionPatch): EntityDefinition {
  const fields = { ...current.schema.fields };
  for (const [name, field] of Object.entries(patch.schema?.fields ?? {})) {
    // defineProperty keeps a key such as __proto__ an own property, so validation sees and refuses it.
    if (field === null) delete fields[name];
    else Object.defineProperty(fields, name, { value: field, enumerable: true, writable: true, configurable: true });
  }
  return {
    slug: current.slug,
    name: patch.name ?? current.name,
    schema: { fields },
    form: patch.form ?? current.form,
    lists: patch.lists ?? current.lists,
    capabilities: patch.capabilities ? { ...defaultCapabilities, ...patch.capabilities } : current.capabilities,
  };
}

export type DefinitionInput = z.infer<typeof definitionSchema>;

export type RecordAction = 'view' | 'create' | 'edit' | 'delete';

/** A definition as stored: every optional part filled in. */
export interface EntityDefinition {
  slug: string;
  name: string;
  schema: { fields: Record<string, FieldDefinition> };
  form: { layout: string[][] };
  lists: Record<string, { columns: string[]; sort?: string }>;
  capabilities: Record<RecordAction, string>;
}

export const defaultCapabilities: Record<RecordAction, string> = {
  view: 'svc_view_records',
  create: 'svc_create_records',
  edit: 'svc_edit_records',
  delete: 'svc_delete_records',
};

export function normalise(input: DefinitionInput): EntityDefinition {
  return {
    slug: input.slug,
    name: input.name,
    schema: { fields: input.schema.fields },
    form: input.form ?? { layout: [] },
    lists: input.lists ?? {},
    capabilities: { ...defaultCapabilities, ...input.capabilities },
  };
}

/** `field:asc,other:desc` as a list; undefined when the text is malformed. */
export function parseSortText(textValue: string): { field: string; direction: 'asc' | 'desc' }[] | undefined {
  const parts = textValue.split(',').map((p) => p.trim());
  const out: { field: string; direction: 'asc' | 'desc' }[] = [];
  for (const part of parts) {
    const match = /^([a-z][a-z0-9_]*)(?::(asc|desc))?$/i.exec(part);
    if (!match) return undefined;
    out.push({ field: match[1]!, direction: (match[2]?.toLowerCase() as 'asc' | 'desc' | undefined) ?? 'asc' });
  }
  return out;
}

/** Fields named in the sorts of the definition's lists: these get an index. */
export function sortedFields(def: EntityDefinition): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(def.lists)) {
    for (const { field } of parseSortText(list.sort ?? '') ?? []) if (fieldNamed(def.schema.fields, field)) out.add(field);
  }
  return out;
}

const validDate = (s: string) => {
  const d = new Date(`${s}T00:00:00Z`);
  return !Number.isNaN(d.getTime()) && d.toISOString().startsWith(s);
};

function defaultProblem(field: FieldDefinition): string | undefined {
  if (!('default' in field) || field.default === undefined) return undefined;
  switch (field.type) {
    case 'string':
      if (field.max_length !== undefined && field.default.length > field.max_length) return 'is longer than max_length';
      if (field.format === 'email' && !z.email().safeParse(field.default).success) return 'is not an email address';
      return undefined;
    case 'integer':
    case 'number':
      if (!Number.isSafeInteger(field.default) && field.type === 'integer') return 'is not a safe integer';
      if (field.min !== undefined && field.default < field.min) return 'is below min';
      if (field.max !== undefined && field.default > field.max) return 'is above max';
      return undefined;
    case 'enum':
      return field.values.includes(field.default) ? undefined : 'is not one of values';
    case 'date':
      return validDate(field.default) ? undefined : 'is not a calendar date';
    case 'datetime':
      return Number.isNaN(Date.parse(field.default)) ? 'is not a valid date-time' : undefined;
    default:
      return undefined;
  }
}

function fieldProblems(name: string, field: FieldDefinition, entityExists: (slug: string) => boolean): FieldProblem[] {
  const at = `schema.fields.${name}`;
  const problems: FieldProblem[] = [];
  const naming = nameProblem(name);
  if (naming) problems.push({ field: at, message: naming });
  const problem = defaultProblem(field);
  if (problem) problems.push({ field: `${at}.default`, message: problem });
  if (field.unique && (field.type === 'boolean' || field.type === 'json')) {
    problems.push({ field: `${at}.unique`, message: `a ${field.type} field cannot be unique` });
  }
  if ((field.type === 'integer' || field.type === 'number') && field.min !== undefined && field.max !== undefined && field.min > field.max) {
    problems.push({ field: `${at}.min`, message: 'is greater than max' });
  }
  if (field.type === 'integer' && [field.min, field.max].some((v) => v !== undefined && !Number.isSafeInteger(v))) {
    problems.push({ field: at, message: 'min and max must be safe integers' });
  }
  if (field.type === 'enum' && new Set(field.values).size !== field.values.length) {
    problems.push({ field: `${at}.values`, message: 'has duplicates' });
  }
  if (field.type === 'relation' && !entityExists(field.entity)) {
    problems.push({ field: `${at}.entity`, message: `no entity ${field.entity}` });
  }
  return problems;
}

/**
 * Problems zod cannot see. `entityExists` answers for relation targets (the entity itself
 * counts, so self-relations work).
 */
export function definitionProblems(def: EntityDefinition, entityExists: (slug: string) => boolean): FieldProblem[] {
  const problems: FieldProblem[] = [];
  const slugProblem = nameProblem(def.slug);
  if (slugProblem) problems.push({ field: 'slug', message: slugProblem });
  const fields = def.schema.fields;
  const names = Object.keys(fields);
  if (names.length > 200) problems.push({ field: 'schema.fields', message: 'at most 200 fields' });
  const exists = (slug: string) => slug === def.slug || entityExists(slug);
  for (const name of names) problems.push(...fieldProblems(name, fields[name]!, exists));
  const columns = new Set<string>([...names, ...SYSTEM_COLUMNS]);
  def.form.layout.forEach((row, i) =>
    row.forEach((name, j) => {
      if (!fieldNamed(fields, name)) problems.push({ field: `form.layout.${i}.${j}`, message: `no field ${name}` });
    }),
  );
  for (const [listName, list] of Object.entries(def.lists)) {
    if (nameProblem(listName) && listName !== 'default') problems.push({ field: `lists.${listName}`, message: 'list names follow the field name rules' });
    list.columns.forEach((name, i) => {
      if (!columns.has(name)) problems.push({ field: `lists.${listName}.columns.${i}`, message: `no field ${name}` });
    });
    if (list.sort !== undefined) {
      const sort = parseSortText(list.sort);
      if (!sort) problems.push({ field: `lists.${listName}.sort`, message: 'expected field:asc or field:desc, comma-separated' });
      for (const { field } of sort ?? []) {
        if (!columns.has(field)) problems.push({ field: `lists.${listName}.sort`, message: `no field ${field}` });
        else if (fieldNamed(fields, field)?.type === 'json') problems.push({ field: `lists.${listName}.sort`, message: `cannot sort on json field ${field}` });
      }
    }
  }
  return problems;
}
