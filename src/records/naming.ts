import { createHash } from 'node:crypto';

/**
 * SQL identifiers and literals for user-defined entities. Every identifier that reaches SQL text
 * comes from a slug or field name that passed `isValidName`, and is still quoted; request values
 * never come through here (they are bound parameters).
 */

/** Schema holding one table per user-defined entity. */
export const RECORDS_SCHEMA = 'records';

/** Columns every record table has; field names may not take them. */
export const SYSTEM_COLUMNS = ['uuid', 'created_at', 'updated_at'] as const;

const namePattern = /^[a-z][a-z0-9_]{0,39}$/;

// EQL keywords would make `and = 1` ambiguous; PostgreSQL's reserved words are refused too, so a
// definition reads the same in SQL tools even though every identifier is quoted.
const reservedWords = new Set([
  ...SYSTEM_COLUMNS,
  'and',
  'or',
  'not',
  'in',
  'is',
  'null',
  'true',
  'false',
  'all',
  'analyse',
  'analyze',
  'any',
  'array',
  'as',
  'asc',
  'asymmetric',
  'both',
  'case',
  'cast',
  'check',
  'collate',
  'column',
  'constraint',
  'create',
  'current_catalog',
  'current_date',
  'current_role',
  'current_time',
  'current_timestamp',
  'current_user',
  'default',
  'deferrable',
  'desc',
  'distinct',
  'do',
  'else',
  'end',
  'except',
  'fetch',
  'for',
  'foreign',
  'from',
  'grant',
  'group',
  'having',
  'initially',
  'intersect',
  'into',
  'lateral',
  'leading',
  'limit',
  'localtime',
  'localtimestamp',
  'offset',
  'on',
  'only',
  'order',
  'placing',
  'primary',
  'references',
  'returning',
  'select',
  'session_user',
  'some',
  'symmetric',
  'system_user',
  'table',
  'then',
  'to',
  'trailing',
  'union',
  'unique',
  'user',
  'using',
  'variadic',
  'when',
  'where',
  'window',
  'with',
]);

/**
 * Why `name` cannot be a slug or field name, or undefined when it can. Double underscores are
 * refused because constraint names join slug and field with `__`.
 */
export function nameProblem(name: string): string | undefined {
  if (!namePattern.test(name)) return 'must start with a lower-case letter, then up to 39 lower-case letters, digits or _';
  if (name.includes('__')) return 'may not contain a double underscore';
  if (reservedWords.has(name)) return 'is a reserved word';
  return undefined;
}

export const isValidName = (name: string) => nameProblem(name) === undefined;

/** Quotes an identifier that is already known to be valid; anything else is a programming error. */
export function ident(name: string): string {
  if (!/^[a-z][a-z0-9_]{0,62}$/.test(name)) throw new Error(`refusing unsafe identifier ${JSON.stringify(name)}`);
  return `"${name}"`;
}

export const tableName = (slug: string) => `e_${slug}`;

/** Schema-qualified, quoted table of an entity. */
export const qualifiedTable = (slug: string) => `${ident(RECORDS_SCHEMA)}.${ident(tableName(slug))}`;

export type ConstraintKind = 'uq' | 'idx' | 'fk' | 'enum';

/**
 * Deterministic constraint and index names, so the reconciler can drop what it created and the
 * error translator can map a violated constraint back to its field. PostgreSQL truncates names
 * past 63 bytes; long ones are shortened with a hash so two never collide.
 */
export function constraintName(slug: string, field: string, kind: ConstraintKind): string {
  const name = `${slug}__${field}_${kind}`;
  if (name.length <= 63) return name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 10);
  return `${name.slice(0, 63 - kind.length - 12)}_${hash}_${kind}`;
}

/**
 * A string literal for DDL (defaults, enum checks), where PostgreSQL accepts no parameters. The
 * E'' form escapes backslashes and quotes whatever standard_conforming_strings says. Values
 * here come from a validated entity definition written by an entity manager, never a request.
 */
export function literal(value: string): string {
  if (value.includes('\u0000')) throw new Error('NUL cannot appear in a PostgreSQL literal');
  return `E'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
}
