import { AppError, conflict, validationFailed } from '../platform/errors.js';
import type { EntityDefinition } from './entity-definition.js';
import { constraintName, tableName } from './naming.js';

/**
 * The one place where PostgreSQL errors from record and entity SQL become domain errors. Anything
 * it does not recognise is returned unchanged, so it still surfaces as a logged 500.
 */

interface PgError {
  code: string;
  constraint?: string;
  table?: string;
  column?: string;
}

const isPgError = (err: unknown): err is PgError =>
  typeof err === 'object' && err !== null && typeof (err as PgError).code === 'string' && /^[0-9A-Z]{5}$/.test((err as PgError).code);

/** The field of `entity` whose unique index, foreign key or enum check is `constraint`. */
function fieldOf(entity: EntityDefinition | undefined, constraint: string | undefined, kind: 'uq' | 'fk' | 'enum'): string | undefined {
  if (!entity || !constraint) return undefined;
  return Object.keys(entity.schema.fields).find((name) => constraintName(entity.slug, name, kind) === constraint);
}

// Values that passed the JSON Schema but that PostgreSQL still cannot store (a NUL character,
// a date past year 9999 in an offset that moves it, a float beyond double precision).
const unstorable: Record<string, string> = {
  '22001': 'is too long',
  '22003': 'is out of range',
  '22007': 'is not a valid date or time',
  '22008': 'is not a valid date or time',
  '22021': 'contains a character that cannot be stored (NUL)',
  '22P02': 'has the wrong format',
  '22P05': 'contains a character that cannot be stored (NUL)',
};

/**
 * Translates `err` raised while working on `entity`'s table. Returns an AppError for the known
 * cases, or `err` itself.
 */
export function translateDatabaseError(err: unknown, entity?: EntityDefinition): unknown {
  if (!isPgError(err) || err instanceof AppError) return err;
  const ownTable = entity ? err.table === tableName(entity.slug) : false;
  switch (err.code) {
    case '23505': {
      const field = fieldOf(entity, err.constraint, 'uq');
      return conflict('conflict', field ? `Another ${entity!.slug} record already has this ${field}` : 'A unique value is already taken', field ? { field } : undefined);
    }
    case '23503': {
      if (ownTable) {
        const field = fieldOf(entity, err.constraint, 'fk');
        const target = field ? entity!.schema.fields[field] : undefined;
        const what = target?.type === 'relation' ? `no ${target.entity} record has this uuid` : 'points at a record that does not exist';
        return validationFailed([{ field: field ?? 'body', message: what }]);
      }
      // Our record is the target: another entity's relation still points at it.
      const referencing = err.table?.startsWith('e_') ? err.table.slice(2) : undefined;
      const field = err.constraint?.match(/^[a-z0-9_]+?__([a-z0-9_]+)_fk$/)?.[1];
      return conflict('record_referenced', `The record is referenced by ${referencing ?? 'another'} records; remove those references first`, {
        ...(referencing ? { entity: referencing } : {}),
        ...(field ? { field } : {}),
      });
    }
    case '23502':
      return validationFailed([{ field: err.column ?? 'body', message: 'is required' }]);
    case '23514':
      return validationFailed([{ field: fieldOf(entity, err.constraint, 'enum') ?? 'body', message: 'is not an allowed value' }]);
    case '42P01':
    case '42703':
      return conflict('entity_changed', 'The entity definition changed during the request; retry it');
    case '40001':
    case '40P01':
    case '55P03':
      return conflict('conflict', 'A concurrent change got in the way; retry');
    default: {
      const message = unstorable[err.code];
      return message ? validationFailed([{ field: err.column ?? 'body', message: `a value ${message}` }]) : err;
    }
  }
}

/** Runs `fn`, translating database errors about `entity`'s table. */
export async function translating<T>(entity: EntityDefinition | undefined, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw translateDatabaseError(err, entity);
  }
}
