import { validationFailed } from '../platform/errors.js';
import { fieldNamed, parseSortText, type EntityDefinition } from './entity-definition.js';
import { ident, SYSTEM_COLUMNS } from './naming.js';

/**
 * The column, sort and include parts of record queries, checked against the entity: only names
 * from the definition ever reach SQL.
 */

/** Every column of an entity in output order: uuid, the fields, then the timestamps. */
export const allColumns = (def: EntityDefinition) => ['uuid', ...Object.keys(def.schema.fields), 'created_at', 'updated_at'];

export const selectList = (columns: string[], alias: string) => columns.map((c) => `${alias}.${ident(c)}`).join(', ');

const isColumn = (def: EntityDefinition, name: string) => (SYSTEM_COLUMNS as readonly string[]).includes(name) || Object.hasOwn(def.schema.fields, name);

const splitList = (text: string) =>
  text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

/** Relation fields to deep-load, from the `include` parameter. */
export function parseInclude(def: EntityDefinition, text: string | undefined): { field: string; target: string }[] {
  if (!text) return [];
  const out: { field: string; target: string }[] = [];
  for (const name of new Set(splitList(text))) {
    const field = fieldNamed(def.schema.fields, name);
    if (field?.type !== 'relation') throw validationFailed([{ field: 'include', message: `${name} is not a relation field of ${def.slug}` }]);
    out.push({ field: name, target: field.entity });
  }
  return out;
}

/** Columns to return, from `fields`; uuid always, and every included relation. */
export function parseFields(def: EntityDefinition, text: string | undefined, include: string[]): string[] {
  if (text === undefined) return allColumns(def);
  const wanted = new Set(splitList(text));
  const unknown = [...wanted].filter((name) => !isColumn(def, name));
  if (unknown.length) throw validationFailed([{ field: 'fields', message: `unknown fields: ${unknown.join(', ')}` }]);
  return allColumns(def).filter((c) => c === 'uuid' || wanted.has(c) || include.includes(c));
}

/** ORDER BY from `sort` (or the default list's sort, else creation order), with uuid last so pages are stable. */
export function orderBy(def: EntityDefinition, text: string | undefined, alias: string): string {
  const source = text ?? def.lists.default?.sort ?? 'created_at:asc';
  const sort = parseSortText(source);
  if (!sort || sort.length > 10) throw validationFailed([{ field: 'sort', message: 'expected up to 10 of field:asc or field:desc, comma-separated' }]);
  const problems = sort.filter(({ field }) => !isColumn(def, field) || fieldNamed(def.schema.fields, field)?.type === 'json');
  if (problems.length) throw validationFailed([{ field: 'sort', message: `cannot sort on ${problems.map((p) => p.field).join(', ')}` }]);
  const terms = sort.map(({ field, direction }) => `${alias}.${ident(field)} ${direction}`);
  if (!sort.some((s) => s.field === 'uuid')) terms.push(`${alias}.${ident('uuid')} asc`);
  return terms.join(', ');
}

/** Parameters for a write: json values are sent as JSON text (pg would turn arrays into SQL arrays). */
export function encodeValues(def: EntityDefinition, body: Record<string, unknown>): { columns: string[]; values: unknown[] } {
  const columns = Object.keys(body);
  const values = columns.map((name) => {
    const value = body[name];
    return fieldNamed(def.schema.fields, name)?.type === 'json' && value !== null && value !== undefined ? JSON.stringify(value) : value;
  });
  return { columns, values };
}
