import { expect } from 'vitest';
import type { TestApp } from './app.js';

/** Entities and records shared by the records test files. */

export const root = '/api/management/v1';

export const companyEntity = {
  slug: 'company',
  name: 'Company',
  schema: { fields: { name: { type: 'string', required: true, unique: true }, size: { type: 'integer' } } },
};

export const contactEntity = {
  slug: 'contact',
  name: 'Contact',
  schema: {
    fields: {
      email: { type: 'string', format: 'email', required: true, unique: true, max_length: 200 },
      name: { type: 'string' },
      age: { type: 'integer', min: 0 },
      score: { type: 'number' },
      vip: { type: 'boolean', default: false },
      stage: { type: 'enum', values: ['lead', 'customer', 'partner'] },
      born_on: { type: 'date' },
      seen_at: { type: 'datetime' },
      meta: { type: 'json' },
      company: { type: 'relation', entity: 'company' },
    },
  },
  lists: { default: { columns: ['email', 'name'], sort: 'email:asc' } },
};

export const companies = [
  { name: 'Acme', size: 100 },
  { name: 'Globex', size: 5000 },
  { name: 'Initech', size: null },
  { name: 'Umbrella', size: 12 },
];

export interface Person {
  email: string;
  name: string | null;
  age: number | null;
  score: number | null;
  vip: boolean;
  stage: string | null;
  born_on: string | null;
  seen_at: string | null;
  meta: unknown;
  company: string | null;
}

/** Contacts with a spread of values and gaps, so every operator has matches and misses. */
export const people: Person[] = [
  {
    email: 'ada@example.com',
    name: 'Ada',
    age: 36,
    score: 9.5,
    vip: true,
    stage: 'customer',
    born_on: '1988-12-10',
    seen_at: '2024-05-01T10:00:00.000Z',
    meta: { tags: ['x'] },
    company: 'Acme',
  },
  {
    email: 'bob@example.com',
    name: 'Bob',
    age: 17,
    score: 3.25,
    vip: false,
    stage: 'lead',
    born_on: '2007-01-31',
    seen_at: '2024-06-15T08:30:00.000Z',
    meta: null,
    company: 'Globex',
  },
  { email: 'cy@example.org', name: 'Cy', age: null, score: -1, vip: false, stage: null, born_on: null, seen_at: null, meta: { a: 1 }, company: null },
  {
    email: 'obrien@example.com',
    name: "O'Brien",
    age: 52,
    score: 0,
    vip: true,
    stage: 'partner',
    born_on: '1972-03-01',
    seen_at: '2023-12-31T23:59:59.000Z',
    meta: null,
    company: 'Acme',
  },
  {
    email: 'sale@example.net',
    name: '50% off_sale',
    age: 30,
    score: null,
    vip: false,
    stage: 'lead',
    born_on: '1994-07-04',
    seen_at: '2024-01-01T00:00:00.000Z',
    meta: [1, 2],
    company: 'Initech',
  },
  {
    email: 'emile@example.fr',
    name: 'Émile Zola',
    age: 61,
    score: 7,
    vip: true,
    stage: 'customer',
    born_on: '1963-04-02',
    seen_at: '2024-03-10T12:00:00.000Z',
    meta: null,
    company: 'Globex',
  },
  {
    email: 'anon@example.com',
    name: null,
    age: 25,
    score: 1e-3,
    vip: false,
    stage: 'lead',
    born_on: '2000-02-29',
    seen_at: '2024-03-10T11:59:59.000Z',
    meta: 'text',
    company: null,
  },
];

export interface Seeded {
  companyIds: Map<string, string>;
  personIds: Map<string, string>;
}

/** Creates the two entities and their records through the API. */
export async function seedRecords(app: TestApp): Promise<Seeded> {
  for (const entity of [companyEntity, contactEntity]) {
    const res = await app.admin.post(`${root}/entities`, entity);
    expect(res.status, JSON.stringify(res.body)).toBe(201);
  }
  const companyIds = new Map<string, string>();
  for (const company of companies) {
    const res = await app.admin.post(`${root}/records/company`, company);
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    companyIds.set(company.name, res.body.data.uuid);
  }
  const personIds = new Map<string, string>();
  const bulk = await app.admin.post(
    `${root}/records/contact/_bulk`,
    people.map((p) => ({ op: 'create', fields: { ...p, company: p.company ? companyIds.get(p.company) : null } })),
  );
  expect(bulk.status, JSON.stringify(bulk.body)).toBe(200);
  expect(bulk.body.data.failed, JSON.stringify(bulk.body.data.results)).toBe(0);
  bulk.body.data.results.forEach((r: { uuid: string }, i: number) => personIds.set(people[i]!.email, r.uuid));
  return { companyIds, personIds };
}
