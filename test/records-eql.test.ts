import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { companies, people, root, seedRecords, type Person, type Seeded } from './helpers/records-fixture.js';

let app: TestApp;
let seeded: Seeded;

beforeAll(async () => {
  app = await startTestApp();
  seeded = await seedRecords(app);
});
afterAll(async () => app?.close());

async function emails(eql: string): Promise<string[]> {
  const res = await app.admin.get(`${root}/records/contact?per_page=200&fields=email&eql=${encodeURIComponent(eql)}`);
  expect(res.status, `${eql}: ${JSON.stringify(res.body)}`).toBe(200);
  expect(res.body.data.total).toBe(res.body.data.items.length);
  return res.body.data.items.map((r: { email: string }) => r.email).sort();
}

// The oracle: what each expression means, written in JavaScript over the seeded data. Positive
// comparisons never match a missing value; negations always do.
type Check = (p: Person) => boolean;
const has =
  <K extends keyof Person>(k: K, test: (v: NonNullable<Person[K]>) => boolean): Check =>
  (p) =>
    p[k] !== null && test(p[k] as NonNullable<Person[K]>);
const not =
  (c: Check): Check =>
  (p) =>
    !c(p);
const size = (p: Person) => companies.find((c) => c.name === p.company)?.size ?? null;
const time = (s: string) => Date.parse(s);

const cases: Record<string, [string, Check][]> = {
  string: [
    ["name = 'Ada'", has('name', (v) => v === 'Ada')],
    ["name != 'Ada'", not(has('name', (v) => v === 'Ada'))],
    ["name < 'C'", has('name', (v) => v < 'C')],
    ["name >= 'C'", has('name', (v) => v >= 'C')],
    ["name <= 'Bob'", has('name', (v) => v <= 'Bob')],
    ["name > 'Bob'", has('name', (v) => v > 'Bob')],
    ["name ~ 'ADA'", has('name', (v) => v.toLowerCase().includes('ada'))],
    ["name !~ 'b'", not(has('name', (v) => v.toLowerCase().includes('b')))],
    ["name ~ '%'", has('name', (v) => v.includes('%'))],
    ["name ~ '_'", has('name', (v) => v.includes('_'))],
    ["name in ('Ada', 'Bob', 'Nobody')", has('name', (v) => ['Ada', 'Bob'].includes(v))],
    ["name not in ('Ada')", not(has('name', (v) => v === 'Ada'))],
    ['name is null', (p) => p.name === null],
    ['name is not null', (p) => p.name !== null],
    [String.raw`name = 'O\'Brien'`, has('name', (v) => v === "O'Brien")],
    [`name = "O'Brien"`, has('name', (v) => v === "O'Brien")],
    ["name = 'Émile Zola'", has('name', (v) => v.startsWith('É'))],
  ],
  integer: [
    ['age = 36', has('age', (v) => v === 36)],
    ['age != 36', not(has('age', (v) => v === 36))],
    ['age < 30', has('age', (v) => v < 30)],
    ['age <= 30', has('age', (v) => v <= 30)],
    ['age > 50', has('age', (v) => v > 50)],
    ['age >= 52', has('age', (v) => v >= 52)],
    ['age in (17, 25)', has('age', (v) => v === 17 || v === 25)],
    ['age not in (17)', not(has('age', (v) => v === 17))],
    ['age is null', (p) => p.age === null],
  ],
  number: [
    ['score > 0', has('score', (v) => v > 0)],
    ['score <= 0', has('score', (v) => v <= 0)],
    ['score = 3.25', has('score', (v) => v === 3.25)],
    ['score < 1e-2', has('score', (v) => v < 0.01)],
    ['score in (-1, 0)', has('score', (v) => v === -1 || v === 0)],
    ['score not in (-1, 0)', not(has('score', (v) => v === -1 || v === 0))],
    ['score >= 7', has('score', (v) => v >= 7)],
    ['score is null', (p) => p.score === null],
    ['score != -1', not(has('score', (v) => v === -1))],
    ['score is not null', (p) => p.score !== null],
  ],
  boolean: [
    ['vip = true', (p) => p.vip],
    ['vip = FALSE', (p) => !p.vip],
    ['vip != true', (p) => !p.vip],
    ['vip != false', (p) => p.vip],
    ['vip is not null', () => true],
  ],
  enum: [
    ["stage = 'lead'", has('stage', (v) => v === 'lead')],
    ["stage != 'lead'", not(has('stage', (v) => v === 'lead'))],
    ["stage in ('customer', 'partner')", has('stage', (v) => v !== 'lead')],
    ["stage not in ('lead')", not(has('stage', (v) => v === 'lead'))],
    ['stage is null', (p) => p.stage === null],
  ],
  date: [
    ["born_on < '1980-01-01'", has('born_on', (v) => v < '1980-01-01')],
    ["born_on >= '1988-12-10'", has('born_on', (v) => v >= '1988-12-10')],
    ["born_on = '2000-02-29'", has('born_on', (v) => v === '2000-02-29')],
    ["born_on <= '1972-03-01'", has('born_on', (v) => v <= '1972-03-01')],
    ["born_on not in ('1972-03-01')", not(has('born_on', (v) => v === '1972-03-01'))],
    ['born_on is not null', (p) => p.born_on !== null],
    ["born_on != '2000-02-29'", not(has('born_on', (v) => v === '2000-02-29'))],
    ["born_on in ('1972-03-01', '1994-07-04')", has('born_on', (v) => ['1972-03-01', '1994-07-04'].includes(v))],
    ["born_on > '2000-01-01' or born_on is null", (p) => p.born_on === null || p.born_on > '2000-01-01'],
  ],
  datetime: [
    ["seen_at >= '2024-03-10T12:00:00Z'", has('seen_at', (v) => time(v) >= time('2024-03-10T12:00:00Z'))],
    ["seen_at < '2024-01-01'", has('seen_at', (v) => time(v) < time('2024-01-01T00:00:00Z'))],
    ["seen_at = '2024-05-01T12:00:00+02:00'", has('seen_at', (v) => time(v) === time('2024-05-01T10:00:00Z'))],
    ["seen_at <= '2024-03-10T11:59:59.000Z'", has('seen_at', (v) => time(v) <= time('2024-03-10T11:59:59Z'))],
    ["seen_at > '2024-05-01T10:00:00Z'", has('seen_at', (v) => time(v) > time('2024-05-01T10:00:00Z'))],
    [
      "seen_at in ('2024-01-01T00:00:00Z', '2024-06-15T10:30:00+02:00')",
      has('seen_at', (v) => [time('2024-01-01T00:00:00Z'), time('2024-06-15T08:30:00Z')].includes(time(v))),
    ],
    ["seen_at not in ('2024-01-01T00:00:00Z')", not(has('seen_at', (v) => time(v) === time('2024-01-01T00:00:00Z')))],
    ["seen_at != '2024-01-01T00:00:00Z'", not(has('seen_at', (v) => time(v) === time('2024-01-01T00:00:00Z')))],
    ['seen_at is null', (p) => p.seen_at === null],
  ],
  json: [
    ['meta is null', (p) => p.meta === null],
    ['meta is not null', (p) => p.meta !== null],
  ],
  'relation and one hop': [
    ["company.name = 'Acme'", (p) => p.company === 'Acme'],
    ["company.name != 'Acme'", (p) => p.company !== 'Acme'],
    ["not company.name = 'Acme'", (p) => p.company !== 'Acme'],
    ['company.size > 1000', (p) => (size(p) ?? 0) > 1000],
    ["company.name ~ 'NIT'", (p) => p.company === 'Initech'],
    ['company.size is null', (p) => p.company !== null && size(p) === null],
    ['company is null', (p) => p.company === null],
    ['company is not null', (p) => p.company !== null],
  ],
  'logic and precedence': [
    ["vip = true and age > 40 or stage = 'lead'", (p) => (p.vip && (p.age ?? 0) > 40) || p.stage === 'lead'],
    ["stage = 'lead' or vip = true and age > 40", (p) => p.stage === 'lead' || (p.vip && (p.age ?? 0) > 40)],
    ["(stage = 'lead' or vip = true) and age > 40", (p) => (p.stage === 'lead' || p.vip) && (p.age ?? 0) > 40],
    ['not (vip = true or age < 20)', (p) => !(p.vip || (p.age !== null && p.age < 20))],
    ["vip = TRUE AnD company.name IN ('Acme') Or Stage IS NULL", () => false],
  ],
};

describe('every EQL operator on every field type, against real rows', () => {
  for (const [type, list] of Object.entries(cases)) {
    it.each(list)(`${type}: %s`, async (eql, check) => {
      if (eql.includes('Stage')) {
        // Keywords are case-insensitive; field names are not.
        const res = await app.admin.get(`${root}/records/contact?eql=${encodeURIComponent(eql)}`);
        expect(res.status).toBe(400);
        expect(res.body.data.reason).toMatch(/unknown field Stage/);
        expect(await emails(eql.replace('Stage', 'stage'))).toEqual(
          people
            .filter((p) => (p.vip && p.company === 'Acme') || p.stage === null)
            .map((p) => p.email)
            .sort(),
        );
        return;
      }
      expect(await emails(eql)).toEqual(
        people
          .filter(check)
          .map((p) => p.email)
          .sort(),
      );
    });
  }

  it('filters on uuid, relation uuids, created_at and updated_at', async () => {
    const ada = seeded.personIds.get('ada@example.com')!;
    const bob = seeded.personIds.get('bob@example.com')!;
    const all = people.map((p) => p.email).sort();
    expect(await emails(`uuid = '${ada}'`)).toEqual(['ada@example.com']);
    expect(await emails(`uuid != '${ada}'`)).toEqual(all.filter((e) => e !== 'ada@example.com'));
    expect(await emails(`uuid in ('${ada}', '${bob}')`)).toEqual(['ada@example.com', 'bob@example.com']);
    expect(await emails(`uuid not in ('${ada}', '${bob}')`)).toHaveLength(people.length - 2);
    const acme = seeded.companyIds.get('Acme');
    const globex = seeded.companyIds.get('Globex');
    const works = (names: string[]) =>
      people
        .filter((p) => p.company !== null && names.includes(p.company))
        .map((p) => p.email)
        .sort();
    expect(await emails(`company = '${acme}'`)).toEqual(works(['Acme']));
    expect(await emails(`company in ('${acme}', '${globex}')`)).toEqual(works(['Acme', 'Globex']));
    expect(await emails(`company != '${acme}'`)).toEqual(
      people
        .filter((p) => p.company !== 'Acme')
        .map((p) => p.email)
        .sort(),
    );
    expect(await emails(`company not in ('${acme}', '${globex}')`)).toEqual(
      people
        .filter((p) => !['Acme', 'Globex'].includes(p.company!))
        .map((p) => p.email)
        .sort(),
    );
    expect(await emails("created_at > '2000-01-01' and updated_at > '2000-01-01'")).toHaveLength(people.length);
    expect(await emails("created_at < '2000-01-01T00:00:00Z'")).toEqual([]);
  });
});

describe('operators that do not fit a field type', () => {
  const misfits: Record<string, string[]> = {
    vip: ['< true', '<= true', '> true', '>= true', "~ 'x'", "!~ 'x'", 'in (true)', 'not in (true)'],
    stage: ["< 'lead'", "<= 'lead'", "> 'lead'", ">= 'lead'", "~ 'le'", "!~ 'le'"],
    meta: ["= 'x'", "!= 'x'", "< 'x'", "~ 'x'", "in ('x')"],
    age: ["~ '1'", "!~ '1'"],
    born_on: ["~ '2000'"],
    seen_at: ["!~ '2024'"],
    company: ["< '0b6a3f7e-1111-4222-8333-944455556666'", "~ 'x'"],
    uuid: ["> '0b6a3f7e-1111-4222-8333-944455556666'", "~ 'x'"],
  };
  it.each(Object.entries(misfits).flatMap(([field, ops]) => ops.map((op) => `${field} ${op}`)))('%s is 400', async (eql) => {
    const res = await app.admin.get(`${root}/records/contact?eql=${encodeURIComponent(eql)}`);
    expect(res.status).toBe(400);
    expect(res.body.data).toMatchObject({ position: 0, reason: expect.stringMatching(/does not apply/) });
  });
});

describe('EQL errors', () => {
  const errors: [string, number, RegExp][] = [
    ["age = 'x'", 6, /takes an integer/],
    ['nope = 1', 0, /unknown field nope/],
    ['vip > true', 0, /operator > does not apply/],
    ["stage ~ 'le'", 0, /operator ~ does not apply/],
    ["meta = 'x'", 0, /does not apply/],
    ["born_on = 'yesterday'", 10, /takes a date/],
    ['age = 1 and (', 13, /expected a field name/],
    ['company.ghost = 1', 0, /unknown field company.ghost/],
  ];
  it.each(errors)('%j is 400 invalid_eql at %i', async (eql, position, reason) => {
    const res = await app.admin.get(`${root}/records/contact?eql=${encodeURIComponent(eql)}`);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ status: 'fail', error: 'invalid_eql', data: { position } });
    expect(res.body.data.reason).toMatch(reason);
  });
});

describe('bound parameters', () => {
  const list = (eql: string, params: unknown) =>
    app.admin.get(`${root}/records/contact?per_page=200&fields=email&eql=${encodeURIComponent(eql)}&params=${encodeURIComponent(JSON.stringify(params))}`);

  it('binds :name values from params, lists inside in (...)', async () => {
    const ada = people.find((p) => p.name === 'Ada')!;
    const res = await list('name = :name', { name: 'Ada' });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.items.map((r: { email: string }) => r.email)).toEqual([ada.email]);
    const named = people.filter((p) => p.name !== null).map((p) => p.name);
    const several = await list('name in (:names) and age >= :min', { names: named, min: 30 });
    expect(several.status, several.text).toBe(200);
    expect(several.body.data.total).toBe(people.filter((p) => p.name !== null && p.age !== null && p.age >= 30).length);
    expect((await list('name in (:names)', { names: [] })).body.data.total).toBe(0);
  });

  it('keeps a value with quotes and EQL in it one value', async () => {
    for (const value of ["x' or name != 'x", "' or 1=1 --", "Ada' or true"]) {
      const res = await list('name = :name', { name: value });
      expect(res.status, res.text).toBe(200);
      expect(res.body.data.total, value).toBe(0);
    }
  });

  it('refuses a missing, unused or mistyped parameter and params that are not a JSON object', async () => {
    const missing = await list('name = :name', {});
    expect(missing.body).toMatchObject({ error: 'invalid_eql', data: { position: 7, reason: expect.stringMatching(/no value for the parameter :name/) } });
    const unused = await list('name = :name', { name: 'Ada', nmae: 'x' });
    expect(unused.body).toMatchObject({ error: 'validation_failed', data: { errors: [{ field: 'params.nmae' }] } });
    const typed = await list('age = :age', { age: '42' });
    expect(typed.body).toMatchObject({ error: 'invalid_eql', data: { position: 6, reason: 'age takes an integer' } });
    for (const params of ['[1]', 'not json', '"x"']) {
      const res = await app.admin.get(`${root}/records/contact?eql=${encodeURIComponent('name = :n')}&params=${encodeURIComponent(params)}`);
      expect(res.status, params).toBe(400);
      expect(res.body.data.errors[0].field).toBe('params');
    }
  });
});

describe('injection attempts', () => {
  const attempts = [
    "name = ''; drop table records.e_contact; --'",
    "name = 'x' or 1=1",
    "name = 'x'; delete from records.e_contact",
    '"name" = \'x\'',
    'name = $1',
    "name = 'x' -- comment",
    "nаme = 'x'", // Cyrillic а
    "name = 'a\\u0000b'",
    `name = '${'x'.repeat(5000)}'`,
    `${'('.repeat(1000)}name = 'x'${')'.repeat(1000)}`,
    `${'not '.repeat(500)}name = 'x'`,
    `name in (${Array.from({ length: 600 }, (_, i) => i).join(',')})`,
    'company.name.evil = 1',
    "records.e_contact = 'x'",
  ];
  it.each(attempts.map((a) => [a.length > 60 ? `${a.slice(0, 60)}…` : a, a]))('%s gives 400 invalid_eql', async (_, eql) => {
    const res = await app.admin.get(`${root}/records/contact?eql=${encodeURIComponent(eql)}`);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_eql');
    expect(res.text).not.toMatch(/select|syntax error|postgres/i);
  });

  it('treats quotes, SQL and unicode inside a string value as data', async () => {
    for (const value of ["\\'; drop table records.e_contact; --", '💥 ünïcødé', '\\\\', "\\' or \\'1\\'=\\'1"]) {
      expect(await emails(`name = '${value}'`)).toEqual([]);
    }
    expect(await emails(`name ~ "'"`)).toEqual(['obrien@example.com']);
  });

  it('leaves the data intact', async () => {
    expect(await app.sql('select count(*)::int as n from records.e_contact')).toEqual([{ n: people.length }]);
    expect(await app.sql('select count(*)::int as n from records.e_company')).toEqual([{ n: companies.length }]);
  });
});
