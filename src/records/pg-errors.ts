import { translateDatabaseError, type PgError } from '../db/database-errors.js';
import { conflict } from '../platform/errors.js';
import { fieldNamed, type EntityDefinition } from './entity-definition.js';
import { constraintName } from './naming.js';

/**
 * Records' names for the service's database-error translator: an entity's constraints are named
 * after its fields, and a record still referenced by another entity's relation is a
 * `record_referenced` conflict naming that entity and field.
 */

/** The field of `entity` whose unique index, foreign key or enum check is `constraint`. */
function fieldOf(entity: EntityDefinition | undefined, constraint: string | undefined, kind: 'uq' | 'fk' | 'enum'): string | undefined {
  if (!entity || !constraint) return undefined;
  return Object.keys(entity.schema.fields).find((name) => constraintName(entity.slug, name, kind) === constraint);
}

const kinds = { unique: 'uq', foreign_key: 'fk', check: 'enum' } as const;

/** Translates `err` raised while working on `entity`'s table; other errors are returned unchanged. */
export function translateRecordError(err: unknown, entity?: EntityDefinition): unknown {
  const pg = err as PgError;
  if (pg && typeof pg === 'object' && (pg.code === '42P01' || pg.code === '42703')) {
    return conflict('entity_changed', 'The entity definition changed during the request; retry it');
  }
  return translateDatabaseError(err, {
    field: (e, kind) => fieldOf(entity, e.constraint, kinds[kind]),
    dangling: (field) => {
      const target = entity ? fieldNamed(entity.schema.fields, field) : undefined;
      return target?.type === 'relation' ? `no ${target.entity} record has this uuid` : 'points at a record that does not exist';
    },
    duplicate: (field) => (field && entity ? `Another ${entity.slug} record already has this ${field}` : 'A unique value is already taken'),
    referenced: (e) => {
      const referencing = e.table?.startsWith('e_') ? e.table.slice(2) : undefined;
      const field = e.constraint?.match(/^[a-z0-9_]+?__([a-z0-9_]+)_fk$/)?.[1];
      return conflict('record_referenced', `The record is referenced by ${referencing ?? 'another'} records; remove those references first`, {
        ...(referencing ? { entity: referencing } : {}),
        ...(field ? { field } : {}),
      });
    },
  });
}

/** Runs `fn`, translating database errors about `entity`'s table. */
export async function translating<T>(entity: EntityDefinition | undefined, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw translateRecordError(err, entity);
  }
}
