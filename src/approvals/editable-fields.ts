import type { ErrorObject } from 'ajv/dist/2020.js';
import { validationFailed, type FieldProblem } from '../platform/errors.js';
import { ExpressionLimitError, type ExpressionSandbox } from '../nodes/expression-sandbox.js';
import { schemaValidators } from '../nodes/schema-validators.mjs';

// What an approver may change of an approval's fields: the keys the node's `editable` JSON Schema
// lists under `properties`, and only so that the editable part of the fields still satisfies the
// schema. Pure, so it is unit tested on its own (editable-fields.test.ts).

/** Largest `editable` schema a node may carry (JSON text); a schema is configuration, not data. */
export const MAX_EDITABLE_SCHEMA_BYTES = 16 * 1024;
/** Largest set of fields an approval carries (JSON text). */
export const MAX_FIELDS_BYTES = 64 * 1024;

export type EditableSchema = { type: 'object'; properties: Record<string, Record<string, unknown>> } & Record<string, unknown>;

const { validatorOf } = schemaValidators();

/**
 * Why `schema` cannot serve as an `editable` schema, or undefined when it can. A stored schema may
 * hold `{{ }}` expressions (a maximum taken from the trigger): it is compiled once they are
 * evaluated (`templates: true` checks only its shape).
 */
export function editableSchemaProblem(schema: unknown, options: { templates?: boolean } = {}): string | undefined {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return 'must be a JSON Schema object';
  const s = schema as Record<string, unknown>;
  if (s.type !== 'object') return 'must be a JSON Schema with "type": "object"';
  if (typeof s.properties !== 'object' || s.properties === null || Array.isArray(s.properties) || !Object.keys(s.properties).length) {
    return 'must list the editable fields under "properties"';
  }
  const text = JSON.stringify(schema);
  if (text.length > MAX_EDITABLE_SCHEMA_BYTES) return `must be at most ${MAX_EDITABLE_SCHEMA_BYTES} bytes of JSON`;
  if (options.templates && text.includes('{{')) return undefined;
  try {
    validatorOf(schema as EditableSchema);
  } catch (err) {
    return `is not a valid JSON Schema: ${(err as Error).message}`;
  }
  return undefined;
}

/** The names of the fields an approver may change. */
export const editableKeys = (schema: EditableSchema | null): string[] => (schema ? Object.keys(schema.properties) : []);

function problemOf(error: NonNullable<SchemaErrors>[number]): FieldProblem {
  if (error.keyword === 'required') return { field: `fields.${String(error.params.missingProperty)}`, message: 'is required' };
  if (error.keyword === 'additionalProperties') return { field: `fields.${String(error.params.additionalProperty)}`, message: 'is not an editable field' };
  const path = error.instancePath.split('/').slice(1).join('.');
  if (error.keyword === 'enum')
    return { field: `fields.${path}`, message: `must be one of ${(error.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}` };
  return { field: path ? `fields.${path}` : 'fields', message: error.message ?? 'is invalid' };
}

/** A JSON Schema's verdict on a value: null when it holds, else what Ajv reports. */
export type SchemaErrors = Pick<ErrorObject, 'keyword' | 'instancePath' | 'params' | 'message'>[] | null;

/**
 * Checks a value against an `editable` schema. Its `pattern`s are the workflow author's regular
 * expressions, which can backtrack for hours on a short value: the service checks in the
 * expression sandbox's threads, under their time limit (ExpressionSandbox.validateSchema), never on
 * a thread that serves requests. `checkInThisThread` is for tests of trusted schemas.
 */
export type SchemaCheck = (schema: EditableSchema, value: Record<string, unknown>) => Promise<SchemaErrors>;

export const checkInThisThread: SchemaCheck = async (schema, value) => {
  const validate = validatorOf(schema);
  return validate(value) ? null : validate.errors!;
};

/** The service's check: on the sandbox's threads; past their limits the edits are refused (400 naming `fields`), nothing stored. */
export const checkInSandbox =
  (sandbox: Pick<ExpressionSandbox, 'validateSchema'>): SchemaCheck =>
  async (schema, value) => {
    try {
      return await sandbox.validateSchema(schema, value);
    } catch (err) {
      const why = err instanceof ExpressionLimitError ? err.message : `the check failed (${(err as Error).message})`;
      throw validationFailed([{ field: 'fields', message: `could not be checked against the approval's editable schema: ${why}` }]);
    }
  };

/**
 * Merges an approver's `edits` into `current` and checks them: each edited key must be editable,
 * and the editable part of the result must satisfy the schema (checked by `check`). Answers the
 * merged fields, or the problems (each naming `fields.<key>`).
 */
export async function applyEdits(
  schema: EditableSchema | null,
  current: Record<string, unknown>,
  edits: Record<string, unknown>,
  check: SchemaCheck,
): Promise<{ fields: Record<string, unknown> } | { problems: FieldProblem[] }> {
  const keys = editableKeys(schema);
  const problems: FieldProblem[] = Object.keys(edits)
    .filter((k) => !keys.includes(k))
    .map((k) => ({
      field: `fields.${k}`,
      message: schema ? `is not editable (editable: ${keys.join(', ')})` : 'is not editable: this approval has no editable fields',
    }));
  if (problems.length) return { problems };
  const fields = { ...current, ...edits };
  if (JSON.stringify(fields).length > MAX_FIELDS_BYTES)
    return { problems: [{ field: 'fields', message: `must be at most ${MAX_FIELDS_BYTES} bytes of JSON` }] };
  const editable = Object.fromEntries(keys.filter((k) => Object.hasOwn(fields, k)).map((k) => [k, fields[k]]));
  const errors = await check(schema!, editable);
  if (errors) return { problems: [...new Map(errors.map(problemOf).map((p) => [`${p.field}:${p.message}`, p])).values()] };
  return { fields };
}

/** How a form input shows one editable field. */
export type InputKind = 'text' | 'number' | 'integer' | 'checkbox' | 'select' | 'textarea';

/** The input an editable property is shown with on the approver's page. */
export function inputKindOf(property: Record<string, unknown>): InputKind {
  if (Array.isArray(property.enum)) return 'select';
  const type = Array.isArray(property.type) ? property.type.find((t) => t !== 'null') : property.type;
  if (type === 'boolean') return 'checkbox';
  if (type === 'integer') return 'integer';
  if (type === 'number') return 'number';
  if (type === 'string') return typeof property.maxLength === 'number' && property.maxLength <= 200 ? 'text' : 'textarea';
  return 'textarea';
}

/**
 * The form input of the editable field at `index` (in the order of the schema's `properties`): an
 * index, not the field's name, because form decoding reads dots and brackets in names as nesting.
 */
export const fieldInput = (index: number) => `field_${index}`;

/**
 * The edits a submitted form holds (inputs named by fieldInput), each read as its property's type
 * says: numbers as numbers (an empty one is left out), a checkbox as true when sent, an enum as the
 * listed value it spells, anything else a JSON value when it parses as one for a JSON property.
 * A value that does not read as its type stays a string, so the schema names the field.
 */
export function editsFromForm(schema: EditableSchema | null, form: Record<string, string>): Record<string, unknown> {
  const edits: Record<string, unknown> = {};
  for (const [index, key] of editableKeys(schema).entries()) {
    const property = schema!.properties[key]!;
    const kind = inputKindOf(property);
    const raw = form[fieldInput(index)];
    if (kind === 'checkbox') {
      edits[key] = raw !== undefined;
      continue;
    }
    if (raw === undefined) continue;
    if (kind === 'number' || kind === 'integer') {
      if (raw.trim() === '') continue;
      const n = Number(raw);
      edits[key] = Number.isFinite(n) ? n : raw;
    } else if (kind === 'select') {
      const match = (property.enum as unknown[]).find((v) => String(v) === raw);
      edits[key] = match === undefined ? raw : match;
    } else if (property.type === undefined || (property.type !== 'string' && !(Array.isArray(property.type) && property.type.includes('string')))) {
      try {
        edits[key] = JSON.parse(raw);
      } catch {
        edits[key] = raw;
      }
    } else {
      edits[key] = raw;
    }
  }
  return edits;
}
