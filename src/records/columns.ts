import type { EntityDefinition, FieldDefinition } from './entity-definition.js';
import { fieldNamed, sortedFields } from './entity-definition.js';
import { constraintName, ident, literal, qualifiedTable } from './naming.js';

/** How each field type is stored: the pieces of DDL the create plan and the reconciler share. */

export function columnType(field: FieldDefinition): string {
  switch (field.type) {
    case 'string':
      return field.max_length !== undefined ? `varchar(${field.max_length})` : 'text';
    case 'enum':
      return 'text';
    // bigint: JSON integers are doubles, so values are limited to the safe range by the JSON Schema.
    case 'integer':
      return 'bigint';
    case 'number':
      return 'double precision';
    case 'boolean':
      return 'boolean';
    case 'date':
      return 'date';
    case 'datetime':
      return 'timestamptz';
    case 'json':
      return 'jsonb';
    case 'relation':
    case 'uuid':
      return 'uuid';
  }
}

/** SQL expression of the field's default, or undefined. */
export function defaultSql(field: FieldDefinition): string | undefined {
  if (!('default' in field) || field.default === undefined) return undefined;
  const value = field.default;
  switch (field.type) {
    case 'integer':
    case 'number':
      if (!Number.isFinite(value)) throw new Error('non-finite default');
      return String(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'date':
      return `${literal(value as string)}::date`;
    case 'datetime':
      return `${literal(value as string)}::timestamptz`;
    case 'json':
      return `${literal(JSON.stringify(value))}::jsonb`;
    default:
      return literal(value as string);
  }
}

/** The CHECK expression limiting an enum column to its values. */
export function enumCheck(name: string, field: FieldDefinition): string | undefined {
  if (field.type !== 'enum') return undefined;
  return `${ident(name)} in (${field.values.map(literal).join(', ')})`;
}

/** The related entity's slug for a relation field (the foreign key target). */
export const relationTarget = (field: FieldDefinition | undefined) => (field?.type === 'relation' ? field.entity : undefined);

/**
 * Whether a field gets a plain index: relation columns (include and EXISTS hops join on them,
 * and deleting a referenced record looks them up) and fields sorted in a list. Unique fields
 * already have their unique index.
 */
export function needsIndex(def: EntityDefinition, name: string): boolean {
  const field = fieldNamed(def.schema.fields, name);
  if (!field || field.unique) return false;
  return field.type === 'relation' || sortedFields(def).has(name);
}

/** Column definition inside CREATE TABLE / ADD COLUMN. */
export function columnDefinition(name: string, field: FieldDefinition): string {
  const parts = [ident(name), columnType(field)];
  const def = defaultSql(field);
  if (def) parts.push(`default ${def}`);
  if (field.required) parts.push('not null');
  return parts.join(' ');
}

export function foreignKeySql(slug: string, name: string, target: string): string {
  return `alter table ${qualifiedTable(slug)} add constraint ${ident(constraintName(slug, name, 'fk'))} foreign key (${ident(name)}) references ${qualifiedTable(target)} (${ident('uuid')})`;
}

export function uniqueIndexSql(slug: string, name: string): string {
  return `create unique index ${ident(constraintName(slug, name, 'uq'))} on ${qualifiedTable(slug)} (${ident(name)})`;
}

export function indexSql(slug: string, name: string): string {
  return `create index ${ident(constraintName(slug, name, 'idx'))} on ${qualifiedTable(slug)} (${ident(name)})`;
}

export function enumCheckSql(slug: string, name: string, field: FieldDefinition): string {
  return `alter table ${qualifiedTable(slug)} add constraint ${ident(constraintName(slug, name, 'enum'))} check (${enumCheck(name, field)})`;
}
