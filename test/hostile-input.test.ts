import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { root, seedRecords } from './helpers/records-fixture.js';

/**
 * Input written to break the service rather than to use it: names that JavaScript objects carry
 * on their prototype, and JSON nested deeper than anything a serialiser can walk back. Each one
 * must be refused as the caller's mistake (400), never answered with a 500.
 */
let app: TestApp;
const W = '/api/workflow/v1/workflows';

beforeAll(async () => {
  app = await startTestApp();
  await seedRecords(app);
});
afterAll(async () => app?.close());

/** A JSON array nested `depth` levels deep, as text (building it as a value and sending it would overflow the client). */
const deepArray = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
const deepObject = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);

describe('names an object inherits are not fields', () => {
  const names = ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf', '__defineGetter__'];

  it('EQL refuses them as unknown fields, on the entity and across a relation', async () => {
    for (const name of names) {
      for (const eql of [`${name} = 'x'`, `${name} is not null`, `company.${name} is null`, `company.${name} = 'x'`]) {
        const res = await app.admin.get(`${root}/records/contact?eql=${encodeURIComponent(eql)}`);
        expect(res.status, `${eql}: ${res.text}`).toBe(400);
        expect(res.body.error).toBe('invalid_eql');
      }
    }
  });

  it('sort, fields and include refuse them too', async () => {
    for (const name of names) {
      for (const query of [`sort=${name}:asc`, `fields=email,${name}`, `include=${name}`]) {
        const res = await app.admin.get(`${root}/records/contact?${query}`);
        expect(res.status, `${query}: ${res.text}`).toBe(400);
      }
    }
  });

  it('a record body naming them is a validation problem', async () => {
    for (const name of names) {
      const res = await app.admin.request('POST', `${root}/records/contact`, {
        raw: `{"email": "proto-${name.replace(/_/g, '')}@example.com", "${name}": 1}`,
        contentType: 'application/json',
      });
      expect(res.status, `${name}: ${res.text}`).toBe(400);
    }
  });

  it('an entity definition naming them in its form, lists or sort is refused', async () => {
    for (const name of ['constructor', 'toString']) {
      const form = await app.admin.post(`${root}/entities`, {
        slug: `proto_form_${name.toLowerCase()}`,
        name: 'Proto',
        schema: { fields: { title: { type: 'string' } } },
        form: { layout: [[name]] },
      });
      expect(form.status, form.text).toBe(400);
      const lists = await app.admin.post(`${root}/entities`, {
        slug: `proto_list_${name.toLowerCase()}`,
        name: 'Proto',
        schema: { fields: { title: { type: 'string' } } },
        lists: { default: { columns: [name], sort: `${name}:asc` } },
      });
      expect(lists.status, lists.text).toBe(400);
    }
  });
});

describe('JSON nested deeper than the service walks is refused', () => {
  const depth = 20_000;

  it('as a run payload, a workflow configuration, a record field, a bulk body and a webhook body', async () => {
    const workflow = await app.admin.post(W, {
      title: 'Deep input',
      trigger: { type: 'webhook' },
      nodes: [{ id: 'echo', type: 'transform', config: { value: '{{ trigger }}' } }],
    });
    expect(workflow.status, workflow.text).toBe(201);
    const { id, slug } = workflow.body.data;
    const secret = workflow.body.data.webhook.secret as string;
    expect((await app.admin.post(`${W}/${id}/activate`)).status).toBe(200);

    const attempts: [string, string, string, Record<string, string>?][] = [
      ['run payload', `${W}/${id}/run`, `{"payload": ${deepObject(depth)}}`],
      [
        'workflow configuration',
        W,
        `{"title": "Deep", "trigger": {"type": "manual"}, "nodes": [{"id": "t", "type": "transform", "config": {"value": ${deepArray(depth)}}}]}`,
      ],
      ['record field', `${root}/records/contact`, `{"email": "deep@example.com", "meta": ${deepArray(depth)}}`],
      ['bulk body', `${root}/records/contact/_bulk`, `[{"op": "create", "fields": {"email": "deep2@example.com", "meta": ${deepObject(depth)}}}]`],
      ['webhook body', `/api/workflow/v1/hooks/${slug}`, deepObject(depth), { 'x-webhook-secret': secret }],
      // YAML nests without JSON's brackets being parsed first: the file's own text is bounded too.
      ['workflow file', '/api/workflow/v1/plan', JSON.stringify({ files: [{ path: 'deep.yaml', content: `a: ${'['.repeat(depth)}${']'.repeat(depth)}` }] })],
    ];
    for (const [label, path, raw, headers] of attempts) {
      const res = await app.admin.request('POST', path, { raw, contentType: 'application/json', ...(headers ? { headers } : {}) });
      expect(res.status, `${label}: ${res.text.slice(0, 300)}`).toBe(400);
      expect(res.body.message, label).toMatch(/nest/);
    }
    // Nothing was started or stored.
    expect(await app.sql('select id from executions where workflow_id = $1', [id])).toEqual([]);
    expect(await app.sql(`select uuid from records.e_contact where email like 'deep%'`)).toEqual([]);
  });

  it('JSON of ordinary depth still goes through', async () => {
    const res = await app.admin.request('POST', `${root}/records/contact`, {
      raw: `{"email": "shallow@example.com", "meta": ${deepObject(50)}}`,
      contentType: 'application/json',
    });
    expect(res.status, res.text).toBe(201);
  });
});
