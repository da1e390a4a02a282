import { columnDefinition, columnType, defaultSql, enumCheckSql, foreignKeySql, indexSql, needsIndex, relationTarget, uniqueIndexSql } from './columns.js';
import { fieldNamed, type EntityDefinition, type FieldDefinition } from './entity-definition.js';
import { constraintName, ident, literal, qualifiedTable, RECORDS_SCHEMA } from './naming.js';

/**
 * The reconciler: old definition + new definition -> the ordered DDL that turns one table into
 * the other. Pure: it reads no database, so the same plan is shown by a dry run and applied.
 */

export type ChangeKind =
  | 'create_table'
  | 'add_field'
  | 'drop_field'
  | 'change_type'
  | 'set_required'
  | 'drop_required'
  | 'set_default'
  | 'drop_default'
  | 'add_enum'
  | 'change_enum'
  | 'drop_enum'
  | 'add_relation'
  | 'drop_relation'
  | 'add_unique'
  | 'drop_unique'
  | 'add_index'
  | 'drop_index';

/** A query run just before a change; a count above zero refuses the change with `reason`. */
export interface Precheck {
  sql: string;
  reason: string;
}

export interface Change {
  kind: ChangeKind;
  field: string | null;
  sql: string;
  /** True when applying the change loses data (a dropped field, a narrowing type change). */
  destructive: boolean;
  precheck?: Precheck;
}

/** A change the reconciler will not make, such as a type change without a safe cast. */
export interface Refusal {
  field: string;
  from: string;
  to: string;
  reason: string;
}

export interface Plan {
  changes: Change[];
  destructive: boolean;
  refusals: Refusal[];
}

// Drops before type changes before additions, so nothing depends on what is about to go away.
const stage: Record<ChangeKind, number> = {
  create_table: 0,
  drop_index: 1,
  drop_unique: 1,
  drop_relation: 1,
  drop_enum: 1,
  drop_field: 2,
  drop_required: 3,
  drop_default: 3,
  change_type: 4,
  add_field: 5,
  set_default: 6,
  set_required: 6,
  add_enum: 7,
  change_enum: 7,
  add_relation: 8,
  add_unique: 9,
  add_index: 9,
};

function finish(changes: Change[], refusals: Refusal[] = []): Plan {
  const ordered = changes
    .map((c, i) => ({ c, i }))
    .sort((a, b) => stage[a.c.kind] - stage[b.c.kind] || a.i - b.i)
    .map(({ c }) => c);
  return { changes: ordered, destructive: ordered.some((c) => c.destructive), refusals };
}

const typeLabel = (f: FieldDefinition) =>
  f.type === 'string' && f.max_length !== undefined ? `string(${f.max_length})` : f.type === 'relation' ? `relation(${f.entity})` : f.type;

const count = (slug: string, where: string) => `select count(*)::int as n from ${qualifiedTable(slug)} where ${where}`;

function facetAdditions(slug: string, name: string, field: FieldDefinition, def: EntityDefinition, isNew: boolean): Change[] {
  const out: Change[] = [];
  const col = ident(name);
  if (field.type === 'enum') {
    const values = field.values.map(literal).join(', ');
    out.push({
      kind: 'add_enum',
      field: name,
      sql: enumCheckSql(slug, name, field),
      destructive: false,
      ...(isNew
        ? {}
        : { precheck: { sql: count(slug, `${col} is not null and ${col} not in (${values})`), reason: 'records hold a value outside the new values' } }),
    });
  }
  const target = relationTarget(field);
  if (target) {
    out.push({
      kind: 'add_relation',
      field: name,
      sql: foreignKeySql(slug, name, target),
      destructive: false,
      ...(isNew
        ? {}
        : {
            precheck: {
              sql: count(slug, `${col} is not null and not exists (select 1 from ${qualifiedTable(target)} r where r."uuid" = ${qualifiedTable(slug)}.${col})`),
              reason: `records point at no ${target} record`,
            },
          }),
    });
  }
  if (field.unique) {
    out.push({
      kind: 'add_unique',
      field: name,
      sql: uniqueIndexSql(slug, name),
      destructive: false,
      precheck: {
        sql: `select count(*)::int as n from (select ${col} from ${qualifiedTable(slug)} where ${col} is not null group by ${col} having count(*) > 1) d`,
        reason: 'values are held by more than one record',
      },
    });
  }
  if (needsIndex(def, name)) out.push({ kind: 'add_index', field: name, sql: indexSql(slug, name), destructive: false });
  return out;
}

/** The plan that creates an entity's table from nothing. */
export function planCreate(def: EntityDefinition): Plan {
  const columns = [
    `${ident('uuid')} uuid primary key default gen_random_uuid()`,
    `${ident('created_at')} timestamptz not null default now()`,
    `${ident('updated_at')} timestamptz not null default now()`,
    ...Object.entries(def.schema.fields).map(([name, field]) => columnDefinition(name, field)),
  ];
  const changes: Change[] = [
    { kind: 'create_table', field: null, sql: `create table ${qualifiedTable(def.slug)} (\n  ${columns.join(',\n  ')}\n)`, destructive: false },
  ];
  for (const [name, field] of Object.entries(def.schema.fields)) changes.push(...facetAdditions(def.slug, name, field, def, true));
  return finish(changes);
}

const dropIndex = (slug: string, name: string, kind: 'uq' | 'idx') => `drop index ${ident(RECORDS_SCHEMA)}.${ident(constraintName(slug, name, kind))}`;
const dropConstraint = (slug: string, name: string, kind: 'fk' | 'enum') =>
  `alter table ${qualifiedTable(slug)} drop constraint ${ident(constraintName(slug, name, kind))}`;

/**
 * The cast for a column type change: `using` expression and whether it loses data, or a reason
 * to refuse. Widening casts are safe; narrowing ones are destructive; the rest are refused.
 */
function castFor(name: string, from: FieldDefinition, to: FieldDefinition): { using: string; destructive: boolean } | { refuse: string } {
  const col = ident(name);
  const toType = columnType(to);
  const asText = (expr: string) => {
    const limit = to.type === 'string' ? to.max_length : undefined;
    return { using: limit !== undefined ? `left(${expr}, ${limit})` : expr, destructive: limit !== undefined };
  };
  if (to.type === 'json') return { using: `to_jsonb(${col})`, destructive: false };
  if (to.type === 'string' || to.type === 'enum') {
    if (from.type === 'string' || from.type === 'enum') {
      const fromLimit = from.type === 'string' ? from.max_length : undefined;
      const toLimit = to.type === 'string' ? to.max_length : undefined;
      const widening = toLimit === undefined || (fromLimit !== undefined && toLimit >= fromLimit);
      return widening ? { using: `${col}::${toType}`, destructive: false } : asText(col);
    }
    if (to.type === 'enum') return { refuse: 'only string fields can become enums' };
    if (from.type === 'datetime') return asText(`to_json(${col}) #>> '{}'`);
    if (from.type === 'json') return asText(`${col} #>> '{}'`);
    return asText(`${col}::text`);
  }
  if (from.type === 'integer' && to.type === 'number') return { using: `${col}::double precision`, destructive: false };
  if (from.type === 'number' && to.type === 'integer') return { using: `round(${col})::bigint`, destructive: true };
  if (from.type === 'date' && to.type === 'datetime') return { using: `(${col}::timestamp at time zone 'UTC')`, destructive: false };
  if (from.type === 'datetime' && to.type === 'date') return { using: `(${col} at time zone 'UTC')::date`, destructive: true };
  return { refuse: `no safe cast from ${from.type} to ${to.type}; add a new field instead` };
}

/**
 * The changes of one field kept under its name: its column first (type, default, required), then
 * its facets (enum check, relation, unique, index); a refusal when its type cannot change.
 */
function fieldChanges(
  slug: string,
  name: string,
  from: FieldDefinition,
  to: FieldDefinition,
  oldDef: EntityDefinition,
  newDef: EntityDefinition,
): Change[] | Refusal {
  const column = columnChanges(slug, name, from, to);
  if (!Array.isArray(column)) return column;
  return [...column, ...facetChanges(slug, name, { field: from, def: oldDef }, { field: to, def: newDef })];
}

/** The changes of a field's column: its type (with the cast), its default, whether it is required. */
export function columnChanges(slug: string, name: string, from: FieldDefinition, to: FieldDefinition): Change[] | Refusal {
  const table = qualifiedTable(slug);
  const col = ident(name);
  const changes: Change[] = [];
  const typeChanges = columnType(from) !== columnType(to);
  if (typeChanges) {
    const cast = castFor(name, from, to);
    if ('refuse' in cast) return { field: name, from: typeLabel(from), to: typeLabel(to), reason: cast.refuse };
    changes.push({
      kind: 'change_type',
      field: name,
      sql: `alter table ${table} alter column ${col} type ${columnType(to)} using ${cast.using}`,
      destructive: cast.destructive,
    });
  }
  const oldDefault = defaultSql(from);
  const newDefault = defaultSql(to);
  // A default of the old type may not cast to the new one, so it is dropped and set around a type change.
  if (oldDefault !== undefined && (oldDefault !== newDefault || typeChanges)) {
    changes.push({ kind: 'drop_default', field: name, sql: `alter table ${table} alter column ${col} drop default`, destructive: false });
  }
  if (newDefault !== undefined && (oldDefault !== newDefault || typeChanges)) {
    changes.push({ kind: 'set_default', field: name, sql: `alter table ${table} alter column ${col} set default ${newDefault}`, destructive: false });
  }
  if (!from.required && to.required) {
    changes.push({
      kind: 'set_required',
      field: name,
      sql: `alter table ${table} alter column ${col} set not null`,
      destructive: false,
      precheck: { sql: count(slug, `${col} is null`), reason: 'records have no value; give them one first' },
    });
  }
  if (from.required && !to.required)
    changes.push({ kind: 'drop_required', field: name, sql: `alter table ${table} alter column ${col} drop not null`, destructive: false });
  return changes;
}

/**
 * The changes of a field's facets, each dropped before it is added again: its enum check, its
 * relation, its unique index, and its index (for relations and list sorts of its definition).
 */
export function facetChanges(
  slug: string,
  name: string,
  old: { field: FieldDefinition; def: EntityDefinition },
  next: { field: FieldDefinition; def: EntityDefinition },
): Change[] {
  const { field: from } = old;
  const { field: to, def: newDef } = next;
  const changes: Change[] = [];
  const oldValues = from.type === 'enum' ? JSON.stringify(from.values) : undefined;
  const newValues = to.type === 'enum' ? JSON.stringify(to.values) : undefined;
  if (oldValues && !newValues) changes.push({ kind: 'drop_enum', field: name, sql: dropConstraint(slug, name, 'enum'), destructive: false });
  if (oldValues !== newValues && newValues) {
    const [added] = facetAdditions(slug, name, to, newDef, false).filter((c) => c.kind === 'add_enum');
    if (oldValues) changes.push({ ...added!, kind: 'change_enum', sql: `${dropConstraint(slug, name, 'enum')};\n${added!.sql}` });
    else changes.push(added!);
  }
  const oldTarget = relationTarget(from);
  const newTarget = relationTarget(to);
  if (oldTarget && oldTarget !== newTarget) changes.push({ kind: 'drop_relation', field: name, sql: dropConstraint(slug, name, 'fk'), destructive: false });
  if (newTarget && oldTarget !== newTarget) changes.push(...facetAdditions(slug, name, to, newDef, false).filter((c) => c.kind === 'add_relation'));
  if (from.unique && !to.unique) changes.push({ kind: 'drop_unique', field: name, sql: dropIndex(slug, name, 'uq'), destructive: false });
  if (!from.unique && to.unique) changes.push(...facetAdditions(slug, name, to, newDef, false).filter((c) => c.kind === 'add_unique'));
  const hadIndex = needsIndex(old.def, name);
  const hasIndex = needsIndex(newDef, name);
  if (hadIndex && !hasIndex) changes.push({ kind: 'drop_index', field: name, sql: dropIndex(slug, name, 'idx'), destructive: false });
  if (!hadIndex && hasIndex) changes.push({ kind: 'add_index', field: name, sql: indexSql(slug, name), destructive: false });
  return changes;
}

/** The ordered changes from `oldDef` to `newDef` (same slug), with refusals for impossible ones. */
export function reconcile(oldDef: EntityDefinition, newDef: EntityDefinition): Plan {
  if (oldDef.slug !== newDef.slug) throw new Error('the reconciler compares two versions of one entity');
  const slug = newDef.slug;
  const table = qualifiedTable(slug);
  const changes: Change[] = [];
  const refusals: Refusal[] = [];
  const oldFields = oldDef.schema.fields;
  const newFields = newDef.schema.fields;
  for (const name of Object.keys(oldFields)) {
    // Dropping the column drops its indexes and constraints with it.
    if (!fieldNamed(newFields, name))
      changes.push({ kind: 'drop_field', field: name, sql: `alter table ${table} drop column ${ident(name)}`, destructive: true });
  }
  for (const [name, field] of Object.entries(newFields)) {
    const before = fieldNamed(oldFields, name);
    if (!before) {
      changes.push({
        kind: 'add_field',
        field: name,
        sql: `alter table ${table} add column ${columnDefinition(name, field)}`,
        destructive: false,
        ...(field.required && defaultSql(field) === undefined
          ? { precheck: { sql: `select count(*)::int as n from ${table}`, reason: 'records exist; a new required field needs a default' } }
          : {}),
      });
      changes.push(...facetAdditions(slug, name, field, newDef, true));
      continue;
    }
    const result = fieldChanges(slug, name, before, field, oldDef, newDef);
    if (Array.isArray(result)) changes.push(...result);
    else refusals.push(result);
  }
  return finish(changes, refusals);
}
