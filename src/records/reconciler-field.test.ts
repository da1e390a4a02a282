import { describe, expect, it } from 'vitest';
import { normalise, type DefinitionInput, type EntityDefinition } from './entity-definition.js';
import { columnChanges, facetChanges } from './reconciler.js';

/**
 * The two halves of one field's changes, on their own: its column (type, default, required) and
 * its facets (enum check, relation, unique, index). reconciler.test.ts covers the whole plan.
 */
type Fields = DefinitionInput['schema']['fields'];
const entity = (fields: Fields, extra: Partial<DefinitionInput> = {}): EntityDefinition =>
  normalise({ slug: 'contact', name: 'Contact', schema: { fields }, ...extra });
/** The normalised definition of field `f` in an entity of that one field. */
const field = (def: Fields[string]) => entity({ f: def }).schema.fields.f!;
const kinds = (changes: { kind: string }[]) => changes.map((c) => c.kind);

describe('columnChanges', () => {
  it('changes the type first, with the default dropped and set again around it', () => {
    const changes = columnChanges('contact', 'f', field({ type: 'integer', default: 1 }), field({ type: 'number', default: 1 }));
    expect(Array.isArray(changes) && kinds(changes)).toEqual(['change_type', 'drop_default', 'set_default']);
    expect(Array.isArray(changes) && changes[0]).toMatchObject({
      sql: 'alter table "records"."e_contact" alter column "f" type double precision using "f"::double precision',
      destructive: false,
    });
  });

  it('leaves an unchanged default alone when the type stays', () => {
    expect(columnChanges('contact', 'f', field({ type: 'string', default: 'a' }), field({ type: 'string', default: 'a', required: true }))).toEqual([
      {
        kind: 'set_required',
        field: 'f',
        sql: 'alter table "records"."e_contact" alter column "f" set not null',
        destructive: false,
        precheck: { sql: 'select count(*)::int as n from "records"."e_contact" where "f" is null', reason: 'records have no value; give them one first' },
      },
    ]);
    expect(kinds(columnChanges('contact', 'f', field({ type: 'string', required: true }), field({ type: 'string' })) as { kind: string }[])).toEqual([
      'drop_required',
    ]);
  });

  it('refuses a type change without a safe cast, naming both types', () => {
    expect(columnChanges('contact', 'f', field({ type: 'boolean' }), field({ type: 'date' }))).toEqual({
      field: 'f',
      from: 'boolean',
      to: 'date',
      reason: 'no safe cast from boolean to date; add a new field instead',
    });
  });
});

describe('facetChanges', () => {
  const facets = (from: Fields[string], to: Fields[string], extra: { old?: Partial<DefinitionInput>; next?: Partial<DefinitionInput> } = {}) =>
    facetChanges('contact', 'f', { field: field(from), def: entity({ f: from }, extra.old) }, { field: field(to), def: entity({ f: to }, extra.next) });

  it('replaces an enum check whose values changed in one step, drops it when the field stops being an enum', () => {
    const changed = facets({ type: 'enum', values: ['a'] }, { type: 'enum', values: ['a', 'b'] });
    expect(kinds(changed)).toEqual(['change_enum']);
    expect(changed[0]!.sql).toBe(
      `alter table "records"."e_contact" drop constraint "contact__f_enum";\nalter table "records"."e_contact" add constraint "contact__f_enum" check ("f" in (E'a', E'b'))`,
    );
    expect(kinds(facets({ type: 'enum', values: ['a'] }, { type: 'string' }))).toEqual(['drop_enum']);
    expect(kinds(facets({ type: 'string' }, { type: 'enum', values: ['a'] }))).toEqual(['add_enum']);
  });

  it('moves a relation: drops the old key, adds the new one with the index relations get', () => {
    expect(kinds(facets({ type: 'relation', entity: 'company' }, { type: 'relation', entity: 'person' }))).toEqual(['drop_relation', 'add_relation']);
    expect(kinds(facets({ type: 'relation', entity: 'company' }, { type: 'string' }))).toEqual(['drop_relation', 'drop_index']);
  });

  it('adds and drops the unique index, and the sort index a list asks for', () => {
    expect(kinds(facets({ type: 'string' }, { type: 'string', unique: true }))).toEqual(['add_unique']);
    expect(kinds(facets({ type: 'string', unique: true }, { type: 'string' }))).toEqual(['drop_unique']);
    const sorted = { lists: { default: { columns: ['f'], sort: 'f:desc' } } };
    expect(kinds(facets({ type: 'string' }, { type: 'string' }, { next: sorted }))).toEqual(['add_index']);
    expect(kinds(facets({ type: 'string' }, { type: 'string' }, { old: sorted }))).toEqual(['drop_index']);
    expect(facets({ type: 'string' }, { type: 'string' }, { old: sorted, next: sorted })).toEqual([]);
  });
});
