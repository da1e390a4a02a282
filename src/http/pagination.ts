import { z } from 'zod';

/** `page` (1-based) and `per_page` (1..max) query parameters; out of range is a 400, never clamped. */
export function pagination(max: number, fallback = 20) {
  return {
    page: z.coerce.number().int().min(1).max(1_000_000).default(1),
    per_page: z.coerce.number().int().min(1).max(max).default(fallback),
  };
}

export const pageOf = <T extends z.ZodType>(item: T) =>
  z.object({ items: z.array(item), total: z.number().int(), page: z.number().int(), per_page: z.number().int() });

/** Query booleans: `true`/`false`/`1`/`0`. */
export const queryBoolean = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');

/** Ids are PostgreSQL `integer`s: anything beyond is refused as input, not left to the database. */
export const MAX_ID = 2_147_483_647;
export const idParam = z.object({ id: z.coerce.number().int().positive().max(MAX_ID) });
