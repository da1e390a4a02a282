import { describe, expect, it } from 'vitest';
import { AppError } from '../platform/errors.js';
import { keyColumns, pgErrorOf, translateDatabaseError } from './database-errors.js';

const pg = (fields: Record<string, string>) => Object.assign(new Error('duplicate key value violates unique constraint'), fields);

describe('database error translator', () => {
  it('reads key columns, never values, from the detail', () => {
    expect(keyColumns('Key (slug)=(secret-value) already exists.')).toEqual(['slug']);
    expect(keyColumns('Key (user_id, name)=(3, x) already exists.')).toEqual(['user_id', 'name']);
    expect(keyColumns(undefined)).toEqual([]);
  });

  it('turns a unique violation into 409 conflict naming the field', () => {
    const out = translateDatabaseError(pg({ code: '23505', detail: 'Key (login)=(ada) already exists.' })) as AppError;
    expect(out).toBeInstanceOf(AppError);
    expect([out.status, out.code, out.data]).toEqual([409, 'conflict', { field: 'login' }]);
    expect(out.message).not.toContain('ada');
  });

  it('finds the PostgreSQL error inside a wrapper (the ORM, a driver)', () => {
    const wrapped = Object.assign(new Error('wrapped'), { cause: pg({ code: '23505', detail: 'Key (slug)=(a) already exists.' }) });
    expect(pgErrorOf(wrapped)?.code).toBe('23505');
    expect((translateDatabaseError(wrapped) as AppError).data).toEqual({ field: 'slug' });
  });

  it('tells a dangling reference (400) from a row still referenced (409)', () => {
    const dangling = translateDatabaseError(pg({ code: '23503', detail: 'Key (owner_id)=(9) is not present in table "users".' })) as AppError;
    expect([dangling.status, dangling.code, dangling.data]).toEqual([
      400,
      'validation_failed',
      { errors: [{ field: 'owner_id', message: 'points at something that does not exist' }] },
    ]);
    const referenced = translateDatabaseError(
      pg({ code: '23503', table: 'executions', detail: 'Key (id)=(1) is still referenced from table "executions".' }),
    ) as AppError;
    expect([referenced.status, referenced.code]).toEqual([409, 'conflict']);
  });

  it('maps unstorable values to 400 and leaves everything else alone', () => {
    expect((translateDatabaseError(pg({ code: '22003', column: 'age' })) as AppError).status).toBe(400);
    const other = new Error('boom');
    expect(translateDatabaseError(other)).toBe(other);
    expect(translateDatabaseError(pg({ code: '57P01' }))).not.toBeInstanceOf(AppError);
  });
});
