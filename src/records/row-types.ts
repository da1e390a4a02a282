import pg from 'pg';
import type { RowTypes } from '../db/sql.js';

/**
 * How record values are read from their tables, as JSON wants them: bigint as a number (the JSON
 * Schema keeps it safe), a date as its 'YYYY-MM-DD' text (pg would make a local-midnight Date),
 * a timestamp as ISO 8601 UTC. Record tables are not ORM entities (their columns come from entity
 * definitions at run time): the records feature queries them through the service's plain-SQL
 * helper with these row types.
 */
const timestamptz = pg.types.getTypeParser(1184, 'text') as (value: string) => Date;

export const recordRowTypes: RowTypes = {
  20: (value) => Number(value),
  1082: (value) => value,
  1184: (value) => timestamptz(value).toISOString(),
};
