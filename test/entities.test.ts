import { Ajv2020 } from 'ajv/dist/2020.js';
import * as addFormatsModule from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Sql } from '../src/db/sql.js';
import { recordRowTypes } from '../src/records/row-types.js';
import { NotifiedCache } from '../src/platform/notified-cache.js';
import { ENTITY_CHANNEL, EntityService, type StoredEntity } from '../src/records/entity.service.js';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';

const addFormats = (addFormatsModule as unknown as { default: (ajv: Ajv2020) => void }).default;
const root = '/api/management/v1';

let app: TestApp;
let editor: TestUser;
let subscriber: TestUser;

beforeAll(async () => {
  app = await startTestApp();
  editor = await app.createUser('editor');
  subscriber = await app.createUser('subscriber');
});
afterAll(async () => app?.close());

const company = { slug: 'company', name: 'Company', schema: { fields: { name: { type: 'string', required: true, unique: true } } } };
const contact = {
  slug: 'contact',
  name: 'Contact',
  schema: {
    fields: {
      email: { type: 'string', format: 'email', required: true, unique: true, max_length: 200 },
      age: { type: 'integer', min: 0 },
      score: { type: 'number' },
      vip: { type: 'boolean', default: false },
      stage: { type: 'enum', values: ['lead', 'customer'] },
      born_on: { type: 'date' },
      seen_at: { type: 'datetime' },
      meta: { type: 'json' },
      company: { type: 'relation', entity: 'company' },
    },
  },
  form: { layout: [['email', 'stage'], ['company']] },
  lists: { default: { columns: ['email', 'stage'], sort: 'seen_at:desc' } },
};

async function columns(table: string) {
  return app.sql<{ column_name: string; data_type: string; is_nullable: string }>(
    `select column_name, data_type, is_nullable from information_schema.columns where table_schema = 'records' and table_name = $1 order by ordinal_position`,
    [table],
  );
}
const indexes = async (table: string) =>
  (await app.sql<{ indexname: string }>(`select indexname from pg_indexes where schemaname = 'records' and tablename = $1 order by 1`, [table])).map(
    (r) => r.indexname,
  );
const foreignKeys = async (table: string) =>
  (await app.sql<{ conname: string }>(`select conname from pg_constraint where conrelid = $1::regclass and contype = 'f'`, [`records.${table}`])).map(
    (r) => r.conname,
  );

async function createEntity(definition: object) {
  const res = await app.admin.post(`${root}/entities`, definition);
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.data;
}

// The tests build on each other's entities and records (created, changed, then deleted), so
// they run in this order even when shuffled.
describe('entities, in order', { shuffle: false }, () => {
  describe('entity lifecycle', () => {
    it('creates a real table per entity with typed columns, unique and sort indexes and foreign keys', async () => {
      await createEntity(company);
      const created = await createEntity(contact);
      expect(Object.keys(created.schema.fields)).toEqual(Object.keys(contact.schema.fields));
      expect(created.capabilities).toEqual({ view: 'svc_view_records', create: 'svc_create_records', edit: 'svc_edit_records', delete: 'svc_delete_records' });
      const cols = await columns('e_contact');
      expect(cols.map((c) => [c.column_name, c.data_type])).toEqual([
        ['uuid', 'uuid'],
        ['created_at', 'timestamp with time zone'],
        ['updated_at', 'timestamp with time zone'],
        ['email', 'character varying'],
        ['age', 'bigint'],
        ['score', 'double precision'],
        ['vip', 'boolean'],
        ['stage', 'text'],
        ['born_on', 'date'],
        ['seen_at', 'timestamp with time zone'],
        ['meta', 'jsonb'],
        ['company', 'uuid'],
      ]);
      expect(cols.find((c) => c.column_name === 'email')!.is_nullable).toBe('NO');
      expect(await indexes('e_contact')).toEqual(['contact__company_idx', 'contact__email_uq', 'contact__seen_at_idx', 'e_contact_pkey']);
      expect(await foreignKeys('e_contact')).toEqual(['contact__company_fk']);
    });

    it('lists entities with record counts and returns the full definition', async () => {
      await app.sql(`insert into records.e_company (name) values ('Acme'), ('Globex')`);
      const list = await subscriber.client.get(`${root}/entities`);
      expect(list.status).toBe(200);
      expect(list.body.data).toMatchObject({ total: 2, page: 1 });
      expect(list.body.data.items).toEqual([
        { slug: 'company', name: 'Company', record_count: 2 },
        { slug: 'contact', name: 'Contact', record_count: 0 },
      ]);
      const one = await subscriber.client.get(`${root}/entities/contact`);
      expect(one.status).toBe(200);
      expect(one.body.data).toMatchObject({ slug: 'contact', form: contact.form, lists: contact.lists, schema: contact.schema });
      expect((await app.admin.get(`${root}/entities/nothing`)).status).toBe(404);
      expect((await app.admin.get(`${root}/entities/Bad-Slug`)).status).toBe(400);
    });

    it('serves a JSON Schema that a draft 2020-12 validator accepts and that validates records', async () => {
      const res = await subscriber.client.get(`${root}/entities/contact/schema`);
      expect(res.status).toBe(200);
      const schema = res.body.data;
      expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
      const ajv = new Ajv2020({ strict: true, allErrors: true });
      addFormats(ajv);
      expect(ajv.validateSchema(schema), JSON.stringify(ajv.errors)).toBe(true);
      const validate = ajv.compile(schema);
      expect(validate({ email: 'a@example.com', stage: 'lead', company: null })).toBe(true);
      expect(validate({ email: 'nope', stage: 'other', age: -1 })).toBe(false);
      expect(validate({ stage: 'lead' })).toBe(false);
    });

    it('refuses invalid definitions, naming every problem', async () => {
      const res = await app.admin.post(`${root}/entities`, {
        slug: 'bad',
        name: 'Bad',
        schema: {
          fields: {
            select: { type: 'string' },
            Upper: { type: 'string' },
            owner: { type: 'relation', entity: 'ghost' },
            size: { type: 'integer', default: 5, max: 3 },
            stage: { type: 'enum', values: ['a'], default: 'b' },
            flag: { type: 'boolean', unique: true },
          },
        },
        lists: { default: { columns: ['nope'], sort: 'missing:asc' } },
      });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('validation_failed');
      expect(res.body.data.errors.map((e: { field: string }) => e.field).sort()).toEqual([
        'lists.default.columns.0',
        'lists.default.sort',
        'schema.fields.Upper',
        'schema.fields.flag.unique',
        'schema.fields.owner.entity',
        'schema.fields.select',
        'schema.fields.size.default',
        'schema.fields.stage.default',
      ]);
      const shape = await app.admin.post(`${root}/entities`, { slug: 'x', name: 'X', schema: { fields: { a: { type: 'text' } } } });
      expect(shape.status).toBe(400);
      expect((await app.admin.post(`${root}/entities`, company)).status).toBe(409);
      expect(await app.sql(`select 1 from pg_tables where schemaname = 'records' and tablename = 'e_bad'`)).toEqual([]);
    });

    it('lets only entity managers write definitions; readers need svc_view_records', async () => {
      const denied = await editor.client.post(`${root}/entities`, { ...company, slug: 'other' });
      expect(denied.status).toBe(403);
      expect(denied.body.data.capability).toBe('svc_manage_entities');
      expect((await editor.client.patch(`${root}/entities/company`, { name: 'X' })).status).toBe(403);
      expect((await editor.client.delete(`${root}/entities/company`)).status).toBe(403);
      expect((await app.anonymous.get(`${root}/entities`)).status).toBe(401);
    });

    it('hides an entity whose view capability the caller lacks', async () => {
      await createEntity({ slug: 'secret', name: 'Secret', schema: { fields: { note: { type: 'string' } } }, capabilities: { view: 'list_users' } });
      const list = await subscriber.client.get(`${root}/entities`);
      expect(list.body.data.items.map((i: { slug: string }) => i.slug)).not.toContain('secret');
      const denied = await subscriber.client.get(`${root}/entities/secret`);
      expect(denied.status).toBe(403);
      expect(denied.body.data.capability).toBe('list_users');
      expect((await app.admin.get(`${root}/entities/secret/schema`)).status).toBe(200);
    });
  });

  describe('PATCH runs the reconciler', () => {
    beforeAll(async () => {
      await createEntity({
        slug: 'deal',
        name: 'Deal',
        schema: { fields: { title: { type: 'string' }, amount: { type: 'integer' }, note: { type: 'string' } } },
      });
      await app.sql(`insert into records.e_deal (title, amount, note) values ('a', 1, 'x'), ('b', 2, null), ('b', 3, 'y')`);
    });

    it('returns the plan of a dry run and applies nothing', async () => {
      const before = await columns('e_deal');
      const res = await app.admin.patch(`${root}/entities/deal?dry_run=true`, {
        name: 'Deals',
        schema: { fields: { note: null, stage: { type: 'enum', values: ['open', 'won'] } } },
      });
      expect(res.status).toBe(200);
      expect(res.body.data.applied).toBe(false);
      expect(res.body.data.dry_run.destructive).toBe(true);
      expect(res.body.data.dry_run.changes).toEqual([
        { kind: 'drop_field', field: 'note', sql: 'alter table "records"."e_deal" drop column "note"', destructive: true },
        { kind: 'add_field', field: 'stage', sql: 'alter table "records"."e_deal" add column "stage" text', destructive: false },
        { kind: 'add_enum', field: 'stage', sql: expect.stringContaining('check ("stage" in'), destructive: false },
      ]);
      expect(res.body.data.entity.name).toBe('Deal');
      expect(await columns('e_deal')).toEqual(before);
      expect((await app.admin.get(`${root}/entities/deal`)).body.data.name).toBe('Deal');
    });

    it('refuses destructive changes without allow_destructive, and applies them with it', async () => {
      const refused = await app.admin.patch(`${root}/entities/deal`, { schema: { fields: { note: null } } });
      expect(refused.status).toBe(409);
      expect(refused.body.error).toBe('destructive_change');
      expect(refused.body.data.dry_run.changes[0]).toMatchObject({ kind: 'drop_field', field: 'note' });
      expect((await columns('e_deal')).map((c) => c.column_name)).toContain('note');
      const applied = await app.admin.patch(`${root}/entities/deal?allow_destructive=true`, { schema: { fields: { note: null } } });
      expect(applied.status).toBe(200);
      expect(applied.body.data.applied).toBe(true);
      expect(Object.keys(applied.body.data.entity.schema.fields)).toEqual(['title', 'amount']);
      expect((await columns('e_deal')).map((c) => c.column_name)).not.toContain('note');
    });

    it('applies a mixed plan in order and keeps the data', async () => {
      const res = await app.admin.patch(`${root}/entities/deal?allow_destructive=true`, {
        schema: { fields: { amount: { type: 'number', required: true }, title: { type: 'string', max_length: 50 } } },
        lists: { default: { columns: ['title'], sort: 'amount:desc' } },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.data.dry_run.changes.map((c: { kind: string; field: string }) => `${c.kind}:${c.field}`)).toEqual([
        'change_type:title',
        'change_type:amount',
        'set_required:amount',
        'add_index:amount',
      ]);
      // Shortening a string may cut values; widening an integer to a number cannot lose anything.
      expect(res.body.data.dry_run.changes.map((c: { destructive: boolean }) => c.destructive)).toEqual([true, false, false, false]);
      expect(await app.sql(`select amount from records.e_deal order by amount`)).toEqual([{ amount: 1 }, { amount: 2 }, { amount: 3 }]);
      expect(await indexes('e_deal')).toContain('deal__amount_idx');
    });

    it('refuses to make a field required while records have no value, all or nothing', async () => {
      await app.sql(`insert into records.e_deal (title, amount) values (null, 4)`);
      const res = await app.admin.patch(`${root}/entities/deal`, {
        schema: { fields: { extra: { type: 'string' }, title: { type: 'string', max_length: 50, required: true } } },
      });
      expect(res.status).toBe(409);
      expect(res.body.error).toBe('change_refused');
      expect(res.body.data).toMatchObject({ kind: 'set_required', field: 'title', records: 1 });
      expect(res.body.message).toMatch(/1 records have no value/);
      // The add_field before it in the same plan was rolled back too.
      expect((await columns('e_deal')).map((c) => c.column_name)).not.toContain('extra');
    });

    it('refuses a unique index over duplicates and an enum that existing values fall outside', async () => {
      const unique = await app.admin.patch(`${root}/entities/deal`, { schema: { fields: { title: { type: 'string', max_length: 50, unique: true } } } });
      expect(unique.status).toBe(409);
      expect(unique.body.data).toMatchObject({ kind: 'add_unique', field: 'title', records: 1 });
      const enumRes = await app.admin.patch(`${root}/entities/deal`, { schema: { fields: { title: { type: 'enum', values: ['a'] } } } });
      expect(enumRes.status).toBe(409);
      expect(enumRes.body.data).toMatchObject({ kind: 'add_enum', field: 'title', records: 2 });
    });

    it('refuses a type change without a safe cast and a change of slug', async () => {
      const res = await app.admin.patch(`${root}/entities/deal`, { schema: { fields: { title: { type: 'integer' } } } });
      expect(res.status).toBe(409);
      expect(res.body.error).toBe('unsupported_change');
      expect(res.body.data.refusals).toEqual([{ field: 'title', from: 'string(50)', to: 'integer', reason: expect.any(String) }]);
      expect((await app.admin.patch(`${root}/entities/deal`, { slug: 'deal2' })).status).toBe(400);
      expect((await app.admin.patch(`${root}/entities/deal?dry_run=maybe`, { name: 'x' })).status).toBe(400);
      expect((await app.admin.patch(`${root}/entities/ghost`, { name: 'x' })).status).toBe(404);
    });
  });

  describe('definition cache', () => {
    it('serves definitions from memory and drops them when another process changes the entity', async () => {
      // A second service on the same database stands in for another API process.
      const other = new EntityService(
        new Sql(app.stack.services.orm.em.getKnex(), recordRowTypes),
        new NotifiedCache<StoredEntity>(app.databaseUrl, ENTITY_CHANNEL),
      );
      try {
        const catalogueReads = vi.spyOn(Sql.prototype, 'query');
        // The cache is used once its LISTEN connection is up, which a loaded machine can take seconds to open.
        await vi.waitFor(
          async () => {
            catalogueReads.mockClear();
            await other.require('deal');
            await other.require('deal');
            expect(catalogueReads.mock.calls.filter(([sql]) => sql.includes('from entities'))).toHaveLength(0);
          },
          { timeout: 15_000, interval: 100 },
        );
        catalogueReads.mockRestore();
        expect((await other.require('deal')).definition.name).toBe('Deal');
        expect((await app.admin.patch(`${root}/entities/deal`, { name: 'Renamed deal' })).status).toBe(200);
        await vi.waitFor(async () => expect((await other.require('deal')).definition.name).toBe('Renamed deal'), { timeout: 15_000, interval: 100 });
      } finally {
        await other.close();
      }
    });
  });

  describe('deleting an entity', () => {
    it('is refused while relations point at it, and force detaches them', async () => {
      const [acme] = await app.sql<{ uuid: string }>(`select uuid from records.e_company where name = 'Acme'`);
      await app.sql(`insert into records.e_contact (email, company) values ('a@acme.test', $1)`, [acme!.uuid]);
      const refused = await app.admin.delete(`${root}/entities/company`);
      expect(refused.status).toBe(409);
      expect(refused.body.error).toBe('entity_protected');
      expect(refused.body.data.entities).toEqual([{ entity: 'contact', field: 'company' }]);
      expect(await app.sql(`select count(*)::int as n from records.e_company`)).toEqual([{ n: 2 }]);

      const forced = await app.admin.delete(`${root}/entities/company?force=true`);
      expect(forced.status).toBe(200);
      expect(forced.body.data).toEqual({ slug: 'company', deleted: true, detached: [{ entity: 'contact', field: 'company' }] });
      expect(await app.sql(`select 1 from pg_tables where schemaname = 'records' and tablename = 'e_company'`)).toEqual([]);
      expect(await foreignKeys('e_contact')).toEqual([]);
      expect(await app.sql(`select company from records.e_contact`)).toEqual([{ company: acme!.uuid }]);
      const after = await app.admin.get(`${root}/entities/contact`);
      expect(after.body.data.schema.fields.company).toEqual({ type: 'uuid' });
      expect((await app.admin.get(`${root}/entities/company`)).status).toBe(404);
    });

    it('handles an entity related to itself, which does not protect it from deletion', async () => {
      await createEntity({
        slug: 'employee',
        name: 'Employee',
        schema: { fields: { name: { type: 'string' }, manager: { type: 'relation', entity: 'employee' } } },
      });
      const boss = (await app.admin.post(`${root}/records/employee`, { name: 'Boss' })).body.data;
      expect((await app.admin.post(`${root}/records/employee`, { name: 'Ann', manager: boss.uuid })).status).toBe(201);
      const res = await app.admin.get(`${root}/records/employee?eql=${encodeURIComponent("manager.name = 'Boss'")}&include=manager`);
      expect(res.body.data.items.map((r: { name: string; manager: { name: string } }) => [r.name, r.manager.name])).toEqual([['Ann', 'Boss']]);
      expect((await app.admin.delete(`${root}/entities/employee`)).status).toBe(200);
    });

    it('deletes an unreferenced entity and its table', async () => {
      expect((await app.admin.delete(`${root}/entities/secret`)).status).toBe(200);
      expect(await app.sql(`select 1 from pg_tables where schemaname = 'records' and tablename = 'e_secret'`)).toEqual([]);
      expect((await app.admin.delete(`${root}/entities/secret`)).status).toBe(404);
    });
  });
});
