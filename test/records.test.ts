import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { Sql } from '../src/db/sql.js';
import type { RecordEvent } from '../src/records/record-events.js';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { companies, people, root, seedRecords, type Seeded } from './helpers/records-fixture.js';

let app: TestApp;
let seeded: Seeded;
let editor: TestUser;
let subscriber: TestUser;
const contacts = `${root}/records/contact`;

beforeAll(async () => {
  app = await startTestApp();
  seeded = await seedRecords(app);
  editor = await app.createUser('editor');
  subscriber = await app.createUser('subscriber');
});
afterAll(async () => app?.close());
afterEach(() => vi.restoreAllMocks());

const fieldsOf = (res: { body: { data: { errors: { field: string }[] } } }) => res.body.data.errors.map((e) => e.field).sort();

// Counts, pages and sort orders are asserted over the records the file has written up to then
// (the bulk and event blocks add more), so the file's tests run in this order even when shuffled.
describe('records, in order', { shuffle: false }, () => {
  describe('one record', () => {
    it('is created, read, changed and deleted', async () => {
      const created = await app.admin.post(contacts, { email: 'new@example.com', age: 40, meta: [{ deep: true }], born_on: '1999-12-31' });
      expect(created.status).toBe(201);
      const record = created.body.data;
      expect(record).toMatchObject({ email: 'new@example.com', age: 40, vip: false, stage: null, meta: [{ deep: true }], born_on: '1999-12-31' });
      expect(record.uuid).toMatch(/^[0-9a-f-]{36}$/);
      expect(record.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
      expect(Object.keys(record)).toEqual([
        'uuid',
        'email',
        'name',
        'age',
        'score',
        'vip',
        'stage',
        'born_on',
        'seen_at',
        'meta',
        'company',
        'created_at',
        'updated_at',
      ]);

      const read = await subscriber.client.get(`${contacts}/${record.uuid}`);
      expect(read.status).toBe(200);
      expect(read.body.data).toEqual(record);

      const changed = await editor.client.patch(`${contacts}/${record.uuid}`, { age: 41, stage: 'lead', seen_at: '2024-02-02T10:00:00+01:00', meta: null });
      expect(changed.status).toBe(200);
      expect(changed.body.data).toMatchObject({ email: 'new@example.com', age: 41, stage: 'lead', seen_at: '2024-02-02T09:00:00.000Z', meta: null });
      expect(Date.parse(changed.body.data.updated_at)).toBeGreaterThan(Date.parse(record.updated_at));

      expect((await editor.client.delete(`${contacts}/${record.uuid}`)).body.data).toEqual({ uuid: record.uuid, deleted: true });
      expect((await app.admin.get(`${contacts}/${record.uuid}`)).status).toBe(404);
      expect((await app.admin.delete(`${contacts}/${record.uuid}`)).status).toBe(404);
      expect((await app.admin.patch(`${contacts}/${record.uuid}`, { age: 1 })).status).toBe(404);
      expect((await app.admin.get(`${contacts}/not-a-uuid`)).status).toBe(400);
      expect((await app.admin.get(`${root}/records/ghost`)).status).toBe(404);
    });

    it('validates writes against the JSON Schema, listing every failing field', async () => {
      const res = await app.admin.post(contacts, {
        email: 'not-an-email',
        age: 1.5,
        stage: 'nope',
        born_on: '2020-02-30',
        seen_at: 'yesterday',
        vip: 'yes',
        extra: 1,
        uuid: randomUUID(),
      });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('validation_failed');
      expect(fieldsOf(res)).toEqual(['age', 'born_on', 'email', 'extra', 'seen_at', 'stage', 'uuid', 'vip']);
      expect(res.body.data.errors.find((e: { field: string }) => e.field === 'stage').message).toContain('"lead"');
      expect(fieldsOf(await app.admin.post(contacts, { name: 'x' }))).toEqual(['email']);
      const ada = seeded.personIds.get('ada@example.com')!;
      expect(fieldsOf(await app.admin.patch(`${contacts}/${ada}`, { email: null, age: -3, created_at: '2020-01-01T00:00:00Z' }))).toEqual([
        'age',
        'created_at',
        'email',
      ]);
      expect((await app.admin.post(contacts, ['not', 'an', 'object'])).status).toBe(400);
    });

    it('answers 409 naming the field for a unique value taken, and 400 for a relation to nothing', async () => {
      const dup = await app.admin.post(contacts, { email: 'ada@example.com' });
      expect(dup.status).toBe(409);
      expect(dup.body).toMatchObject({ error: 'conflict', data: { field: 'email' } });
      const bob = seeded.personIds.get('bob@example.com')!;
      expect((await app.admin.patch(`${contacts}/${bob}`, { email: 'ada@example.com' })).body.data).toEqual({ field: 'email' });
      const missing = await app.admin.post(contacts, { email: 'm@example.com', company: randomUUID() });
      expect(missing.status).toBe(400);
      expect(missing.body.data.errors).toEqual([{ field: 'company', message: 'no company record has this uuid' }]);
      expect(await app.sql(`select 1 from records.e_contact where email = 'm@example.com'`)).toEqual([]);
    });

    it('refuses to delete a record another relation points at', async () => {
      const res = await app.admin.delete(`${root}/records/company/${seeded.companyIds.get('Acme')}`);
      expect(res.status).toBe(409);
      expect(res.body).toMatchObject({ error: 'record_referenced', data: { entity: 'contact', field: 'company' } });
    });
  });

  describe('listing', () => {
    it('sorts on several fields, nulls last ascending and first descending, uuid breaking ties', async () => {
      const res = await app.admin.get(`${contacts}?sort=stage:asc,age:desc&fields=stage,age&per_page=200`);
      expect(res.status).toBe(200);
      const rank = (v: string | null) => (v === null ? 'zzz' : v);
      const expected = [...people]
        .sort((a, b) => rank(a.stage).localeCompare(rank(b.stage)) || (b.age ?? Infinity) - (a.age ?? Infinity))
        .map((p) => [p.stage, p.age]);
      expect(res.body.data.items.map((r: { stage: string; age: number }) => [r.stage, r.age])).toEqual(expected);
      const byDefault = await app.admin.get(`${contacts}?fields=email`);
      expect(byDefault.body.data.items.map((r: { email: string }) => r.email)).toEqual(people.map((p) => p.email).sort());
      for (const bad of ['nope:asc', 'email:up', 'meta:asc', 'email;drop']) {
        const r = await app.admin.get(`${contacts}?sort=${encodeURIComponent(bad)}`);
        expect(r.status).toBe(400);
        expect(r.body.data.errors[0].field).toBe('sort');
      }
    });

    it('returns only the requested fields, always with the uuid', async () => {
      const res = await app.admin.get(`${contacts}?fields=email,stage&per_page=1`);
      expect(Object.keys(res.body.data.items[0])).toEqual(['uuid', 'email', 'stage']);
      const unknown = await app.admin.get(`${contacts}?fields=email,password`);
      expect(unknown.status).toBe(400);
      expect(unknown.body.data.errors[0]).toMatchObject({ field: 'fields', message: expect.stringContaining('password') });
    });

    it('deep-loads relations with one query per relation, never one per row', async () => {
      const spy = vi.spyOn(Sql.prototype, 'query');
      const res = await app.admin.get(`${contacts}?include=company&fields=email&per_page=200`);
      expect(res.status).toBe(200);
      const companyQueries = spy.mock.calls.filter(([sql]) => sql.includes('"e_company"'));
      expect(companyQueries).toHaveLength(1);
      for (const item of res.body.data.items) {
        const person = people.find((p) => p.email === item.email)!;
        if (person.company === null) expect(item.company).toBeNull();
        else
          expect(item.company).toMatchObject({
            uuid: seeded.companyIds.get(person.company),
            name: person.company,
            size: companies.find((c) => c.name === person.company)!.size,
          });
      }
      const one = await app.admin.get(`${contacts}/${seeded.personIds.get('ada@example.com')}?include=company`);
      expect(one.body.data.company.name).toBe('Acme');
      expect((await app.admin.get(`${contacts}?include=email`)).status).toBe(400);
    });

    it('paginates 1-based, 20 by default, 200 at most', async () => {
      const page2 = await app.admin.get(`${contacts}?sort=email:asc&per_page=2&page=2&fields=email`);
      expect(page2.body.data).toMatchObject({ total: people.length, page: 2, per_page: 2 });
      expect(page2.body.data.items.map((r: { email: string }) => r.email)).toEqual(
        people
          .map((p) => p.email)
          .sort()
          .slice(2, 4),
      );
      expect((await app.admin.get(contacts)).body.data.per_page).toBe(20);
      const beyond = await app.admin.get(`${contacts}?page=99`);
      expect(beyond.body.data).toMatchObject({ items: [], total: people.length, page: 99 });
      for (const query of ['per_page=201', 'page=0', 'per_page=0', 'page=abc', 'page=1.5', 'unknown=1']) {
        const res = await app.admin.get(`${contacts}?${query}`);
        expect(res.status, query).toBe(400);
        expect(res.body.error).toBe('validation_failed');
      }
      expect((await app.admin.get(`${contacts}?per_page=200`)).status).toBe(200);
    });
  });

  describe('bulk', () => {
    it('applies good operations and reports bad ones, each in its own savepoint', async () => {
      const keep = (await app.admin.post(contacts, { email: 'bulk-keep@example.com' })).body.data.uuid;
      const gone = (await app.admin.post(contacts, { email: 'bulk-gone@example.com' })).body.data.uuid;
      const ghost = randomUUID();
      const res = await app.admin.post(`${contacts}/_bulk`, [
        { op: 'create', fields: { email: 'bulk-1@example.com', name: 'B1' } },
        { op: 'create', fields: { email: 'not-an-email' } },
        { op: 'create', fields: { email: 'ada@example.com' } },
        { op: 'update', uuid: keep, fields: { age: 18 } },
        { op: 'update', uuid: ghost, fields: { age: 1 } },
        { op: 'delete', uuid: gone },
        { op: 'update', uuid: keep, fields: { nope: 1 } },
        { op: 'delete' },
        { op: 'create', fields: { email: 'bulk-2@example.com', company: ghost } },
        { op: 'create', fields: { email: 'bulk-1@example.com' } },
      ]);
      expect(res.status).toBe(200);
      const { results, ok, failed } = res.body.data;
      expect([ok, failed]).toEqual([3, 7]);
      expect(results.map((r: { status: string; error?: { code: string } }) => r.error?.code ?? r.status)).toEqual([
        'ok',
        'validation_failed',
        'conflict',
        'ok',
        'not_found',
        'ok',
        'validation_failed',
        'invalid_request',
        'validation_failed',
        'conflict',
      ]);
      expect(results.map((r: { index: number }) => r.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      expect(results[0].uuid).toMatch(/^[0-9a-f-]{36}$/);
      expect(results[1].uuid).toBeNull();
      expect(results[4]).toMatchObject({ op: 'update', uuid: ghost });
      expect(results[2].error.data).toEqual({ field: 'email' });
      const rows = await app.sql<{ email: string; age: number | null }>(
        `select email, age::int as age from records.e_contact where email like 'bulk-%' order by email`,
      );
      expect(rows).toEqual([
        { email: 'bulk-1@example.com', age: null },
        { email: 'bulk-keep@example.com', age: 18 },
      ]);
    });

    it('answers 400 for more than 100 operations or a malformed list, and changes nothing', async () => {
      const before = await app.sql('select count(*)::int as n from records.e_contact');
      const tooMany = Array.from({ length: 101 }, (_, i) => ({ op: 'create', fields: { email: `many${i}@example.com` } }));
      for (const body of [tooMany, [], { op: 'create' }, [{ op: 'upsert' }], [{ op: 'create', fields: 'x' }], [{ op: 'create', extra: 1 }]]) {
        const res = await app.admin.post(`${contacts}/_bulk`, body);
        expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      }
      expect(await app.sql('select count(*)::int as n from records.e_contact')).toEqual(before);
      const hundred = await app.admin.post(`${contacts}/_bulk`, tooMany.slice(0, 100));
      expect(hundred.body.data).toMatchObject({ ok: 100, failed: 0 });
    });
  });

  describe('capabilities', () => {
    it('lets a subscriber read but not write', async () => {
      expect((await subscriber.client.get(contacts)).status).toBe(200);
      const ada = seeded.personIds.get('ada@example.com')!;
      const attempts = [
        [await subscriber.client.post(contacts, { email: 's@example.com' }), 'svc_create_records'],
        [await subscriber.client.patch(`${contacts}/${ada}`, { age: 1 }), 'svc_edit_records'],
        [await subscriber.client.delete(`${contacts}/${ada}`), 'svc_delete_records'],
        [await subscriber.client.post(`${contacts}/_bulk`, [{ op: 'create', fields: { email: 's@example.com' } }]), 'svc_create_records'],
      ] as const;
      for (const [res, capability] of attempts) {
        expect(res.status).toBe(403);
        expect(res.body.data.capability).toBe(capability);
      }
      expect((await editor.client.post(contacts, { email: 'e@example.com' })).status).toBe(201);
      expect((await app.anonymous.get(contacts)).status).toBe(401);
    });

    it('follows the capabilities an entity overrides', async () => {
      await app.admin.post(`${root}/entities`, {
        slug: 'memo',
        name: 'Memo',
        schema: { fields: { text: { type: 'string' } } },
        capabilities: { view: 'read', create: 'svc_manage_entities' },
      });
      await app.admin.post(`${root}/entities`, {
        slug: 'vault',
        name: 'Vault',
        schema: { fields: { text: { type: 'string' } } },
        capabilities: { view: 'list_users' },
      });
      const denied = await editor.client.post(`${root}/records/memo`, { text: 'x' });
      expect(denied.status).toBe(403);
      expect(denied.body.data.capability).toBe('svc_manage_entities');
      expect((await app.admin.post(`${root}/records/memo`, { text: 'x' })).status).toBe(201);
      expect((await subscriber.client.get(`${root}/records/memo`)).body.data.total).toBe(1);
      expect((await subscriber.client.get(`${root}/records/vault`)).status).toBe(403);
      expect((await editor.client.post(`${root}/records/vault`, { text: 'x' })).status).toBe(201);
    });
  });

  describe('record events', () => {
    it('are published after commit for creates, updates, deletes and successful bulk operations', async () => {
      const events: RecordEvent[] = [];
      const visible: boolean[] = [];
      const unsubscribe = app.stack.services.recordEvents.subscribe(async (event) => {
        events.push(event);
        // Another connection sees the change: the transaction had committed.
        const rows = await app.sql(`select 1 from records.e_contact where uuid = $1`, [event.record.uuid]);
        visible.push(event.action === 'deleted' ? rows.length === 0 : rows.length === 1);
      });
      // Each change waits for the listener's look at the one before: a look that came after the next
      // change would see that change instead (the record deleted, say), not what was published.
      const looked = (n: number) => vi.waitFor(() => expect(visible).toHaveLength(n));
      try {
        const created = (await app.admin.post(contacts, { email: 'ev@example.com' })).body.data;
        await looked(1);
        await app.admin.patch(`${contacts}/${created.uuid}`, { age: 5 });
        await looked(2);
        await app.admin.patch(`${contacts}/${randomUUID()}`, { age: 5 });
        await app.admin.post(contacts, { email: 'ev@example.com' });
        await app.admin.delete(`${contacts}/${created.uuid}`);
        await looked(3);
        await app.admin.post(`${contacts}/_bulk`, [
          { op: 'create', fields: { email: 'ev-bulk@example.com' } },
          { op: 'create', fields: { email: 'bad' } },
        ]);
        await looked(4);
        expect(events.map((e) => `${e.entity}:${e.action}:${e.record.email}`)).toEqual([
          'contact:created:ev@example.com',
          'contact:updated:ev@example.com',
          'contact:deleted:ev@example.com',
          'contact:created:ev-bulk@example.com',
        ]);
        expect(events[1]!.previous).toMatchObject({ age: null });
        expect(events[1]!.record).toMatchObject({ age: 5 });
        expect(visible).toEqual([true, true, true, true]);
      } finally {
        unsubscribe();
      }
    });
  });
});
