import { describe, expect, it } from 'vitest';
import { normalise, type DefinitionInput, type EntityDefinition } from './entity-definition.js';
import { planCreate, reconcile, type Plan } from './reconciler.js';

type Fields = DefinitionInput['schema']['fields'];
const entity = (fields: Fields, extra: Partial<DefinitionInput> = {}): EntityDefinition =>
  normalise({ slug: 'contact', name: 'Contact', schema: { fields }, ...extra });

const kinds = (plan: Plan) => plan.changes.map((c) => `${c.kind}:${c.field ?? ''}`);
const only = (plan: Plan) => {
  expect(plan.changes).toHaveLength(1);
  return plan.changes[0]!;
};

describe('planCreate', () => {
  it('creates the table with system columns, then checks, foreign keys, unique and sort indexes', () => {
    const plan = planCreate(
      entity(
        {
          email: { type: 'string', max_length: 200, required: true, unique: true },
          stage: { type: 'enum', values: ['lead', "o'neil"], default: 'lead' },
          company: { type: 'relation', entity: 'company' },
          age: { type: 'integer' },
        },
        { lists: { default: { columns: ['email'], sort: 'age:desc' } } },
      ),
    );
    expect(kinds(plan)).toEqual(['create_table:', 'add_enum:stage', 'add_relation:company', 'add_unique:email', 'add_index:company', 'add_index:age']);
    const create = plan.changes[0]!.sql;
    expect(create).toContain('create table "records"."e_contact"');
    expect(create).toContain('"uuid" uuid primary key default gen_random_uuid()');
    expect(create).toContain('"email" varchar(200) not null');
    expect(create).toContain(`"stage" text default E'lead'`);
    expect(create).toContain('"age" bigint');
    expect(plan.changes[1]!.sql).toBe(`alter table "records"."e_contact" add constraint "contact__stage_enum" check ("stage" in (E'lead', E'o''neil'))`);
    expect(plan.changes[2]!.sql).toContain('foreign key ("company") references "records"."e_company" ("uuid")');
    expect(plan.destructive).toBe(false);
  });
});

describe('reconcile: one plan per change kind', () => {
  const base = entity({ name: { type: 'string' }, age: { type: 'integer' } });

  it('plans nothing for an identical definition', () => {
    expect(reconcile(base, base).changes).toEqual([]);
  });

  it('add_field, with a precheck only when a required field has no default', () => {
    const optional = only(reconcile(base, entity({ ...base.schema.fields, nick: { type: 'string' } })));
    expect(optional).toMatchObject({ kind: 'add_field', field: 'nick', destructive: false, sql: 'alter table "records"."e_contact" add column "nick" text' });
    expect(optional.precheck).toBeUndefined();
    const required = only(reconcile(base, entity({ ...base.schema.fields, nick: { type: 'string', required: true } })));
    expect(required.precheck?.sql).toBe('select count(*)::int as n from "records"."e_contact"');
    const withDefault = only(reconcile(base, entity({ ...base.schema.fields, vip: { type: 'boolean', required: true, default: false } })));
    expect(withDefault.sql).toBe('alter table "records"."e_contact" add column "vip" boolean default false not null');
    expect(withDefault.precheck).toBeUndefined();
  });

  it('drop_field is destructive', () => {
    const plan = reconcile(base, entity({ name: { type: 'string' } }));
    expect(only(plan)).toMatchObject({ kind: 'drop_field', field: 'age', destructive: true, sql: 'alter table "records"."e_contact" drop column "age"' });
    expect(plan.destructive).toBe(true);
  });

  it('change_type: widening casts are safe, narrowing ones destructive, the rest refused', () => {
    const widen = only(reconcile(base, entity({ name: { type: 'string' }, age: { type: 'number' } })));
    expect(widen).toMatchObject({
      kind: 'change_type',
      destructive: false,
      sql: 'alter table "records"."e_contact" alter column "age" type double precision using "age"::double precision',
    });
    const toText = only(reconcile(base, entity({ name: { type: 'string' }, age: { type: 'string' } })));
    expect(toText).toMatchObject({ destructive: false, sql: expect.stringContaining('using "age"::text') });
    const narrow = only(reconcile(entity({ score: { type: 'number' } }), entity({ score: { type: 'integer' } })));
    expect(narrow).toMatchObject({ kind: 'change_type', destructive: true, sql: expect.stringContaining('round("score")::bigint') });
    const shorter = only(reconcile(entity({ name: { type: 'string', max_length: 100 } }), entity({ name: { type: 'string', max_length: 10 } })));
    expect(shorter).toMatchObject({ destructive: true, sql: expect.stringContaining('using left("name", 10)') });
    const longer = only(reconcile(entity({ name: { type: 'string', max_length: 10 } }), entity({ name: { type: 'string' } })));
    expect(longer).toMatchObject({ destructive: false, sql: expect.stringContaining('type text using "name"::text') });
    const refused = reconcile(base, entity({ name: { type: 'integer' }, age: { type: 'integer' } }));
    expect(refused.changes).toEqual([]);
    expect(refused.refusals).toEqual([{ field: 'name', from: 'string', to: 'integer', reason: expect.stringContaining('no safe cast') }]);
  });

  it('drops and restores a default around a type change', () => {
    const plan = reconcile(entity({ age: { type: 'integer', default: 1 } }), entity({ age: { type: 'number', default: 1.5 } }));
    expect(kinds(plan)).toEqual(['drop_default:age', 'change_type:age', 'set_default:age']);
    expect(plan.changes[2]!.sql).toBe('alter table "records"."e_contact" alter column "age" set default 1.5');
  });

  it('set_required checks existing rows; drop_required does not', () => {
    const on = only(reconcile(base, entity({ ...base.schema.fields, age: { type: 'integer', required: true } })));
    expect(on).toMatchObject({ kind: 'set_required', sql: 'alter table "records"."e_contact" alter column "age" set not null' });
    expect(on.precheck?.sql).toBe('select count(*)::int as n from "records"."e_contact" where "age" is null');
    const off = only(reconcile(entity({ age: { type: 'integer', required: true } }), entity({ age: { type: 'integer' } })));
    expect(off).toMatchObject({ kind: 'drop_required', sql: expect.stringContaining('drop not null') });
  });

  it('set_default and drop_default', () => {
    expect(only(reconcile(base, entity({ ...base.schema.fields, name: { type: 'string', default: 'x' } })))).toMatchObject({
      kind: 'set_default',
      sql: `alter table "records"."e_contact" alter column "name" set default E'x'`,
    });
    expect(only(reconcile(entity({ name: { type: 'string', default: 'x' } }), entity({ name: { type: 'string' } })))).toMatchObject({ kind: 'drop_default' });
  });

  it('add_enum, change_enum and drop_enum, with prechecks for values in use', () => {
    const added = only(reconcile(base, entity({ ...base.schema.fields, name: { type: 'enum', values: ['a'] } })));
    expect(added).toMatchObject({ kind: 'add_enum', field: 'name' });
    expect(added.precheck?.sql).toContain(`"name" not in (E'a')`);
    const changed = only(reconcile(entity({ s: { type: 'enum', values: ['a', 'b'] } }), entity({ s: { type: 'enum', values: ['a'] } })));
    expect(changed).toMatchObject({
      kind: 'change_enum',
      sql: expect.stringMatching(/drop constraint "contact__s_enum";\n.*add constraint "contact__s_enum" check/),
    });
    expect(only(reconcile(entity({ s: { type: 'enum', values: ['a'] } }), entity({ s: { type: 'string' } })))).toMatchObject({ kind: 'drop_enum' });
  });

  it('add_relation with an index and a precheck for dangling values; drop_relation keeps the column', () => {
    const plan = reconcile(entity({ ref: { type: 'uuid' } }), entity({ ref: { type: 'relation', entity: 'company' } }));
    expect(kinds(plan)).toEqual(['add_relation:ref', 'add_index:ref']);
    expect(plan.changes[0]!.precheck?.sql).toContain('not exists (select 1 from "records"."e_company" r where r."uuid" = "records"."e_contact"."ref")');
    const dropped = reconcile(entity({ ref: { type: 'relation', entity: 'company' } }), entity({ ref: { type: 'uuid' } }));
    expect(kinds(dropped)).toEqual(['drop_relation:ref', 'drop_index:ref']);
    expect(dropped.destructive).toBe(false);
    expect(dropped.changes[0]!.sql).toBe('alter table "records"."e_contact" drop constraint "contact__ref_fk"');
  });

  it('add_unique checks for duplicates; drop_unique drops the index', () => {
    const on = only(reconcile(base, entity({ ...base.schema.fields, name: { type: 'string', unique: true } })));
    expect(on).toMatchObject({ kind: 'add_unique', sql: 'create unique index "contact__name_uq" on "records"."e_contact" ("name")' });
    expect(on.precheck?.sql).toContain('having count(*) > 1');
    expect(only(reconcile(entity({ name: { type: 'string', unique: true } }), entity({ name: { type: 'string' } })))).toMatchObject({
      kind: 'drop_unique',
      sql: 'drop index "records"."contact__name_uq"',
    });
  });

  it('add_index and drop_index follow the sorts of the lists', () => {
    const sorted = entity(base.schema.fields, { lists: { default: { columns: [], sort: 'age:desc,name' } } });
    expect(kinds(reconcile(base, sorted))).toEqual(['add_index:name', 'add_index:age']);
    expect(kinds(reconcile(sorted, base))).toEqual(['drop_index:name', 'drop_index:age']);
  });

  it('orders drops before type changes before additions', () => {
    const from = entity({ a: { type: 'integer' }, b: { type: 'string', unique: true }, c: { type: 'integer' } });
    const to = entity({ c: { type: 'number' }, d: { type: 'string', unique: true }, b: { type: 'string' } });
    expect(kinds(reconcile(from, to))).toEqual(['drop_unique:b', 'drop_field:a', 'change_type:c', 'add_field:d', 'add_unique:d']);
  });
});

describe('field names an object inherits', () => {
  it('a field named constructor or valueof is added and dropped like any other', () => {
    const before = entity({ title: { type: 'string' } });
    const after = entity({ title: { type: 'string' }, constructor: { type: 'integer' as const }, valueof: { type: 'string' as const } });
    expect(kinds(reconcile(before, after))).toEqual(['add_field:constructor', 'add_field:valueof']);
    expect(kinds(reconcile(after, before))).toEqual(['drop_field:constructor', 'drop_field:valueof']);
  });
});
