import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AppError } from '../platform/errors.js';
import { normalise, type EntityDefinition } from './entity-definition.js';
import { withoutPositions, type Expr } from './eql.ast.js';
import { compileEql, hoppedRelations } from './eql.compiler.js';
import { parseEql } from './eql.parser.js';
import { printEql } from './eql.printer.js';

const company: EntityDefinition = normalise({ slug: 'company', name: 'Company', schema: { fields: { name: { type: 'string' }, size: { type: 'integer' } } } });
const contact: EntityDefinition = normalise({
  slug: 'contact',
  name: 'Contact',
  schema: {
    fields: {
      email: { type: 'string', format: 'email' },
      age: { type: 'integer' },
      score: { type: 'number' },
      vip: { type: 'boolean' },
      stage: { type: 'enum', values: ['lead', 'customer'] },
      born_on: { type: 'date' },
      seen_at: { type: 'datetime' },
      meta: { type: 'json' },
      company: { type: 'relation', entity: 'company' },
    },
  },
});

const compile = (source: string) =>
  compileEql(source, parseEql(source), { entity: contact, alias: 't', related: (s) => (s === 'company' ? company : undefined) });

function refusal(source: string) {
  try {
    compile(source);
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('invalid_eql');
    return (err as AppError).data as { position: number; reason: string };
  }
  throw new Error(`expected ${source} to be refused`);
}

describe('EQL compiler', () => {
  it('binds every value as a parameter', () => {
    expect(compile("email = 'a@b.c' and age >= 18")).toEqual({ sql: '(t."email" = $1 and t."age" >= $2)', params: ['a@b.c', 18] });
    expect(compile("stage in ('lead', 'customer')")).toEqual({ sql: 't."stage" in ($1, $2)', params: ['lead', 'customer'] });
  });

  it('turns ~ into a case-insensitive ILIKE with % and _ escaped', () => {
    expect(compile("email ~ '50%_off\\\\'")).toEqual({ sql: 't."email" ilike $1', params: ['%50\\%\\_off\\\\%'] });
  });

  it('makes every negation include missing values (two-valued logic)', () => {
    expect(compile('age != 3').sql).toBe('(t."age" = $1) is not true');
    expect(compile("email !~ 'x'").sql).toBe('(t."email" ilike $1) is not true');
    expect(compile('age not in (1, 2)').sql).toBe('(t."age" in ($1, $2)) is not true');
    expect(compile('not (age < 3 or vip = true)').sql).toBe('((t."age" < $1) is not true and (t."vip" = $2) is not true)');
    expect(compile('age = null').sql).toBe('t."age" is null');
    expect(compile('age != null').sql).toBe('t."age" is not null');
    expect(compile('not meta is not null').sql).toBe('t."meta" is null');
  });

  it('compiles a relation hop to EXISTS on the related table', () => {
    expect(compile("company.name = 'Acme'")).toEqual({
      sql: 'exists (select 1 from "records"."e_company" r where r."uuid" = t."company" and r."name" = $1)',
      params: ['Acme'],
    });
    expect(compile("company.name != 'Acme'").sql).toMatch(/^not exists/);
    expect([...hoppedRelations(parseEql('company.size > 3 or age = 1'), contact)]).toEqual(['company']);
  });

  it('accepts uuid, created_at, updated_at and dates as strings', () => {
    const uuid = '0b6a3f7e-1111-4222-8333-944455556666';
    expect(compile(`uuid = '${uuid}' and created_at > '2024-01-01' and born_on <= '2000-02-29'`).params).toEqual([uuid, '2024-01-01T00:00:00Z', '2000-02-29']);
  });

  const refused: [string, RegExp][] = [
    ['nope = 1', /unknown field nope/],
    ['company.nope = 1', /unknown field company.nope/],
    ["email.name = 'x'", /not a relation/],
    ["age = 'x'", /takes an integer/],
    ['age = 1.5', /takes an integer/],
    ["score > 'x'", /takes a number/],
    ['vip = 1', /takes true or false/],
    ['vip < true', /operator < does not apply/],
    ["stage = 'other'", /is one of/],
    ["stage ~ 'le'", /operator ~ does not apply/],
    ["born_on = '2023-02-30'", /takes a date/],
    ["seen_at > '2024-01-01T10:00:00'", /date-time with offset/],
    ["company = 'not-a-uuid'", /takes a uuid/],
    ["meta = 'x'", /operator = does not apply/],
    ['age > null', /null only compares/],
    ['age in (1, null)', /null cannot be in a list/],
    ["email = 'a\\u0000b'", /NUL/],
  ];
  it.each(refused)('refuses %j', (source, reason) => {
    expect(refusal(source).reason).toMatch(reason);
  });

  it('reports the position of the offending value', () => {
    expect(refusal("age > 1 and stage = 'x'").position).toBe(20);
  });
});

// What compiled SQL may contain besides `$n` parameters and quoted identifiers of the entities.
const sqlWords = new Set(['t', 'r', 'and', 'or', 'not', 'is', 'null', 'true', 'in', 'ilike', 'exists', 'select', '1', 'from', 'where']);
const identifiers = new Set([
  'records',
  'e_company',
  'uuid',
  'created_at',
  'updated_at',
  ...Object.keys(contact.schema.fields),
  ...Object.keys(company.schema.fields),
]);

/** Fails unless `sql` is made only of known identifiers, SQL words, operators and parameters. */
function assertOnlyParameters(sql: string, params: unknown[]) {
  const rest = sql.replace(/"([^"]*)"/g, (_, name: string) => {
    expect(identifiers).toContain(name);
    return ' ';
  });
  expect(rest).not.toMatch(/['\\;-]/);
  const placeholders = [...rest.matchAll(/\$(\d+)/g)].map((m) => Number(m[1]));
  expect(placeholders).toEqual(params.map((_, i) => i + 1));
  for (const word of rest
    .replace(/\$\d+/g, ' ')
    .split(/[\s().,=<>!]+/)
    .filter(Boolean))
    expect(sqlWords).toContain(word);
}

const fieldNames = [...Object.keys(contact.schema.fields), 'uuid', 'created_at', 'company.name', 'company.size', 'company.uuid'];
const hostile = fc.oneof(
  fc.string({ unit: 'binary' }),
  fc.constantFrom("'; drop table records.e_contact; --", '" or 1=1 --', '$1', '\\', '%_', 'lead', '2024-01-01', '0b6a3f7e-1111-4222-8333-944455556666'),
);
type Value = Extract<Expr, { kind: 'compare' }>['value'];
const str = (a: fc.Arbitrary<string>) => a.map((value): Value => ({ type: 'string', value, pos: 0 }));
const num = (a: fc.Arbitrary<number>) => a.map((value): Value => ({ type: 'number', value, pos: 0 }));
const compare = (fields: string[], ops: string[], value: fc.Arbitrary<Value>): fc.Arbitrary<Expr> =>
  fc.record({
    kind: fc.constant('compare' as const),
    field: fc.constantFrom(...fields).map((f) => ({ path: f.split('.') as [string], pos: 0 })),
    op: fc.constantFrom(...(ops as ('=' | '!=')[])),
    value,
    pos: fc.constant(0),
  });
// Mostly leaves that fit their field (so the compiler runs), with hostile strings wherever a
// string goes; some leaves fit nothing, to exercise the refusals.
const fitting = fc.oneof(
  compare(['email', 'name', 'company.name'], ['=', '!=', '<', '>=', '~', '!~'], str(hostile)),
  compare(['age', 'company.size'], ['=', '!=', '<', '>='], num(fc.integer())),
  compare(['score'], ['=', '<', '>'], num(fc.double({ noNaN: true, noDefaultInfinity: true }))),
  compare(
    ['vip'],
    ['=', '!='],
    fc.boolean().map((value): Value => ({ type: 'boolean', value, pos: 0 })),
  ),
  compare(['stage'], ['=', '!='], str(fc.constantFrom('lead', 'customer'))),
  compare(['born_on', 'seen_at', 'created_at'], ['=', '<', '>='], str(fc.constantFrom('2024-01-01', '1999-12-31'))),
  compare(['uuid', 'company', 'company.uuid'], ['=', '!='], str(fc.uuid())),
);
const anyLeaf = compare(fieldNames, ['=', '!=', '<', '>=', '~', '!~'], fc.oneof(str(hostile), num(fc.integer())));
const leaf = fc.oneof({ arbitrary: fitting, weight: 9 }, { arbitrary: anyLeaf, weight: 1 });
const tree = fc
  .array(leaf, { minLength: 1, maxLength: 5 })
  .chain((leaves) =>
    fc
      .array(fc.constantFrom('and' as const, 'or' as const), { minLength: leaves.length - 1, maxLength: leaves.length - 1 })
      .map((ops) => ops.reduce<Expr>((left, kind, i) => ({ kind, left, right: leaves[i + 1]!, pos: 0 }), leaves[0]!)),
  );

describe('no input reaches SQL text', () => {
  it('keeps arbitrary strings out of the compiled SQL', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (source) => {
        try {
          const { sql, params } = compile(source);
          assertOnlyParameters(sql, params);
        } catch (err) {
          expect((err as AppError).code).toBe('invalid_eql');
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('keeps hostile values of well-formed expressions in parameters only', () => {
    fc.assert(
      fc.property(tree, (expr) => {
        const source = printEql(expr);
        try {
          const parsed = parseEql(source);
          expect(withoutPositions(parsed)).toEqual(withoutPositions(expr));
          const { sql, params } = compileEql(source, parsed, { entity: contact, alias: 't', related: () => company });
          assertOnlyParameters(sql, params);
        } catch (err) {
          if (!(err instanceof AppError)) throw err;
          expect(err.code).toBe('invalid_eql');
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('still compiles some of the generated expressions (the property is not vacuous)', () => {
    // A fixed seed: the point is that the generator reaches the compiler, not a lucky draw.
    const samples = fc.sample(tree, { numRuns: 1000, seed: 20261122 });
    const compiled = samples.filter((expr) => {
      try {
        compile(printEql(expr));
        return true;
      } catch {
        return false;
      }
    });
    expect(compiled.length).toBeGreaterThan(300);
  });
});
