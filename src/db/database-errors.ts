import { AppError, conflict, validationFailed } from '../platform/errors.js';

/**
 * The one translator of PostgreSQL errors into domain errors, used by every feature: the error
 * middleware applies it to whatever a request threw, and the records feature adds the names of
 * its entities' fields. A check-then-insert that loses a race (two creates of one slug) thus
 * answers 409 naming the field, never 500. Values from the error's detail never reach a message:
 * only column names do.
 */

export interface PgError {
  code: string;
  constraint?: string;
  table?: string;
  column?: string;
  detail?: string;
}

/** PostgreSQL's own error, also when a driver or the ORM wrapped it. */
export function pgErrorOf(err: unknown): PgError | undefined {
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return e as PgError;
  }
  return undefined;
}

/** The column names in a detail such as `Key (workflow_id, key)=(3, abc) already exists.` */
export function keyColumns(detail: string | undefined): string[] {
  const match = detail?.match(/^Key \(([^)]*)\)=/);
  return match ? match[1]!.split(',').map((c) => c.trim().replace(/^"|"$/g, '')) : [];
}

/** The field a violation names: the last key column (composite keys end with the caller's field). */
const fieldOf = (err: PgError) => keyColumns(err.detail).at(-1) ?? err.column;

// Values that passed validation but that PostgreSQL still cannot store (a NUL character, a date
// past year 9999 in an offset that moves it, a number beyond its column's range).
const unstorable: Record<string, string> = {
  '22001': 'is too long',
  '22003': 'is out of range',
  '22007': 'is not a valid date or time',
  '22008': 'is not a valid date or time',
  '22021': 'contains a character that cannot be stored (NUL)',
  '22P02': 'has the wrong format',
  '22P05': 'contains a character that cannot be stored (NUL)',
};

/** Hooks a feature may give for its own tables (field names that are not column names). */
export interface ConstraintNames {
  /** The field of a unique index, foreign key or check constraint, when the feature knows it. */
  field?(err: PgError, kind: 'unique' | 'foreign_key' | 'check'): string | undefined;
  /** A foreign-key violation where the row written is the target (something still points at it). */
  referenced?(err: PgError): AppError | undefined;
  /** Wording of a unique violation. */
  duplicate?(field: string | undefined): string;
  /** Wording of a reference to something that does not exist. */
  dangling?(field: string): string;
}

/**
 * Translates a PostgreSQL error into an AppError; anything else is returned unchanged (it then
 * surfaces as a logged 500 without its text).
 */
export function translateDatabaseError(err: unknown, names: ConstraintNames = {}): unknown {
  if (err instanceof AppError) return err;
  const pg = pgErrorOf(err);
  if (!pg) return err;
  switch (pg.code) {
    case '23505': {
      const field = names.field?.(pg, 'unique') ?? fieldOf(pg);
      const message = names.duplicate?.(field) ?? (field ? `Another entry already has this ${field}` : 'A unique value is already taken');
      return conflict('conflict', message, field ? { field } : undefined);
    }
    case '23503': {
      // Deleting or updating a row that others still point at, or writing a reference to a row
      // that does not exist: the detail says which.
      if (/is still referenced/.test(pg.detail ?? '')) {
        const referenced = names.referenced?.(pg);
        if (referenced) return referenced;
        return conflict('conflict', `Other ${pg.table ?? 'entries'} still refer to this entry`, pg.table ? { referenced_by: pg.table } : undefined);
      }
      const field = names.field?.(pg, 'foreign_key') ?? fieldOf(pg) ?? 'body';
      return validationFailed([{ field, message: names.dangling?.(field) ?? 'points at something that does not exist' }]);
    }
    case '23502':
      return validationFailed([{ field: pg.column ?? 'body', message: 'is required' }]);
    case '23514':
      return validationFailed([{ field: names.field?.(pg, 'check') ?? pg.column ?? 'body', message: 'is not an allowed value' }]);
    case '40001':
    case '40P01':
    case '55P03':
      return conflict('conflict', 'A concurrent change got in the way; retry');
    default: {
      const message = unstorable[pg.code];
      return message ? validationFailed([{ field: pg.column ?? 'body', message: `a value ${message}` }]) : err;
    }
  }
}
