import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { openOrm } from '../src/db/orm.js';
import { Sql } from '../src/db/sql.js';
import { createLogger } from '../src/platform/logger.js';
import { startTestApp, type TestApp } from './helpers/app.js';

let app: TestApp;
let orm: MikroORM;
let sql: Sql;

beforeAll(async () => {
  app = await startTestApp();
  // One connection: every statement below meets what the ones before it prepared.
  orm = await openOrm(app.databaseUrl, createLogger('silent'), 1);
  sql = new Sql(orm.em.getKnex());
  await sql.query('create table prepared_probe (id int primary key, label int not null)');
  await sql.query('insert into prepared_probe values (1, 10), (2, 20)');
});
afterAll(async () => {
  await orm?.close(true);
  await app?.close();
});

const prepared = () => sql.query<{ name: string }>(`select name from pg_prepared_statements where statement like '%prepared_probe%'`);

describe('prepared statements of the Sql helper', () => {
  it('prepares a statement once per connection and then only executes it, with new values each time', async () => {
    const read = (id: number) => sql.query<{ label: number }>('select label from prepared_probe where id = ?', [id], { prepared: true });
    expect(await read(1)).toEqual([{ label: 10 }]);
    expect(await read(2)).toEqual([{ label: 20 }]);
    const names = await prepared();
    expect(names).toHaveLength(1);
    // Another text is another statement: one name never goes with two texts.
    expect(await sql.query('select label from prepared_probe where id = ? and label > 0', [1], { prepared: true })).toEqual([{ label: 10 }]);
    expect(await prepared()).toHaveLength(2);
    // Without the option nothing is kept.
    await sql.query('select label from prepared_probe where id = ? and label > 1', [1]);
    expect(await prepared()).toHaveLength(2);
  });

  it('prepares a statement again when the session forgot it (DEALLOCATE ALL, as a pooler may run)', async () => {
    const read = () => sql.query<{ label: number }>('select label from prepared_probe where id = 1 and id > 0', [], { prepared: true });
    expect(await read()).toEqual([{ label: 10 }]);
    const other = () => sql.query<{ label: number }>('select label from prepared_probe where id = 2 and id > 0', [], { prepared: true });
    expect(await other()).toEqual([{ label: 20 }]);
    await sql.query('deallocate all');
    expect(await prepared()).toHaveLength(0);
    expect(await read()).toEqual([{ label: 10 }]);
    // Every statement the session forgot is prepared again at its next use, none refused in turn.
    expect(await sql.transaction((tx) => tx.query('select label from prepared_probe where id = 2 and id > 0', [], { prepared: true }))).toEqual([
      { label: 20 },
    ]);
    expect(await prepared()).toHaveLength(2);
  });

  it('prepares a statement again when a migration changed the shape of its answer, instead of failing from then on', async () => {
    const read = () => sql.query<{ label: unknown }>('select label from prepared_probe where id = 2', [], { prepared: true });
    expect(await read()).toEqual([{ label: 20 }]);
    await sql.query('alter table prepared_probe alter column label type text');
    // PostgreSQL refuses the statement prepared before ("cached plan must not change result type").
    expect(await read()).toEqual([{ label: '20' }]);
    expect(await read()).toEqual([{ label: '20' }]);

    // Inside a transaction the refused statement's transaction, rolled back, runs once more.
    const inTx = () =>
      sql.transaction(async (tx) => {
        await tx.query('insert into prepared_probe (id, label) values (?, 30)', [Date.now() % 1_000_000_000]);
        return tx.query<{ label: unknown }>('select label from prepared_probe where id = 1', [], { prepared: true });
      });
    expect(await inTx()).toEqual([{ label: '10' }]);
    await sql.query('alter table prepared_probe alter column label type int using label::int');
    const before = await sql.query<{ n: string }>('select count(*) as n from prepared_probe');
    expect(await inTx()).toEqual([{ label: 10 }]);
    // Its first run was rolled back: one row more, not two.
    const after = await sql.query<{ n: string }>('select count(*) as n from prepared_probe');
    expect(Number(after[0]!.n)).toBe(Number(before[0]!.n) + 1);
  });

  it('prepares a statement again when a migration widened the type of a column a parameter is compared with', async () => {
    const read = (id: number) => sql.query<{ label: number }>('select label from prepared_probe where id = ?', [id], { prepared: true });
    expect(await read(2)).toEqual([{ label: 20 }]);
    await sql.query('alter table prepared_probe alter column id type bigint');
    await sql.query('insert into prepared_probe (id, label) values (?, 40)', [2 ** 40]);
    // The parameter was inferred as int when prepared: 2^40 no longer fits it (22003) until prepared again.
    expect(await read(2 ** 40)).toEqual([{ label: 40 }]);
    expect(await read(2)).toEqual([{ label: 20 }]);
  });
});
