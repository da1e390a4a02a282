import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import type { HttpClient } from './helpers/http.js';

/**
 * The authorization matrix: who may call what. P = anyone, A = any signed-in user,
 * E = editors and administrators, D = administrators only. Kept here, not derived from the code,
 * so a change of access on any route shows up as a failing row.
 */
const matrix: Record<string, 'P' | 'A' | 'E' | 'D'> = {
  'GET /healthz': 'P',
  'GET /readyz': 'P',
  'GET /api/openapi.json': 'P',
  // Its own rule: loopback clients (as every test client is) or the metrics token.
  'GET /metrics': 'P',
  'POST /api/auth/v1/login': 'P',
  'GET /api/auth/v1/me': 'A',
  'GET /api/auth/v1/app-passwords': 'A',
  'POST /api/auth/v1/app-passwords': 'A',
  'DELETE /api/auth/v1/app-passwords/{id}': 'A',
  'GET /api/auth/v1/users': 'D',
  'POST /api/auth/v1/users': 'D',
  'GET /api/workflow/v1/workflows': 'A',
  'POST /api/workflow/v1/workflows': 'E',
  'GET /api/workflow/v1/export': 'A',
  'POST /api/workflow/v1/plan': 'E',
  'POST /api/workflow/v1/apply': 'E',
  'GET /api/workflow/v1/workflow.schema.json': 'P',
  'GET /api/workflow/v1/workflows/{id}': 'A',
  'PATCH /api/workflow/v1/workflows/{id}': 'E',
  'DELETE /api/workflow/v1/workflows/{id}': 'E',
  'POST /api/workflow/v1/workflows/{id}/activate': 'E',
  'POST /api/workflow/v1/workflows/{id}/deactivate': 'E',
  'POST /api/workflow/v1/workflows/{id}/restore': 'E',
  'POST /api/workflow/v1/workflows/{id}/run': 'E',
  'POST /api/workflow/v1/hooks/{slug}': 'P',
  // Editors list the connections they may use; managing connections is for administrators.
  'GET /api/workflow/v1/connections': 'E',
  'POST /api/workflow/v1/connections': 'D',
  'PATCH /api/workflow/v1/connections/{id}': 'D',
  'POST /api/workflow/v1/connections/{id}/test': 'D',
  'DELETE /api/workflow/v1/connections/{id}': 'D',
  'GET /api/workflow/v1/executions': 'A',
  'GET /api/workflow/v1/executions/{id}': 'A',
  'GET /api/workflow/v1/executions/{id}/nodes/{node_id}/items': 'A',
  'POST /api/workflow/v1/executions/{id}/replay': 'E',
  'POST /api/workflow/v1/expressions/evaluate': 'E',
  'POST /api/workflow/v1/executions/{id}/cancel': 'E',
  'POST /api/workflow/v1/events': 'E',
  // The approver's page needs no login: its signed token is the credential (approval-page.test.ts).
  'GET /api/workflow/v1/approvals/{token}': 'P',
  'POST /api/workflow/v1/approvals/{token}': 'P',
  'POST /api/temporal-codec/decode': 'D',
  'POST /api/temporal-codec/encode': 'D',
  'POST /api/agent/v1/sessions': 'E',
  'GET /api/agent/v1/sessions/{id}': 'E',
  'POST /api/agent/v1/sessions/{id}/messages': 'E',
  'POST /api/agent/v1/actions/{action_id}/approve': 'E',
  'POST /api/agent/v1/actions/{action_id}/reject': 'E',
  'GET /api/agent/v1/actions': 'E',
  'GET /api/agent/v1/actions/{action_id}': 'E',
  'GET /api/agent/v1/sessions/{id}/actions': 'E',
  'GET /api/management/v1/entities': 'A',
  'POST /api/management/v1/entities': 'D',
  'GET /api/management/v1/entities/{slug}': 'A',
  'PATCH /api/management/v1/entities/{slug}': 'D',
  'DELETE /api/management/v1/entities/{slug}': 'D',
  'GET /api/management/v1/entities/{slug}/schema': 'A',
  'GET /api/management/v1/records/{entity}': 'A',
  'POST /api/management/v1/records/{entity}': 'E',
  'GET /api/management/v1/records/{entity}/{uuid}': 'A',
  'PATCH /api/management/v1/records/{entity}/{uuid}': 'E',
  'DELETE /api/management/v1/records/{entity}/{uuid}': 'E',
  'POST /api/management/v1/records/{entity}/_bulk': 'E',
  'POST /api/management/v1/licenses': 'D',
  'GET /api/management/v1/licenses': 'D',
  'GET /api/management/v1/licenses/{id}': 'D',
  'PATCH /api/management/v1/licenses/{id}': 'D',
  'GET /api/management/v1/licenses/{id}/activations': 'D',
  'POST /api/management/v1/licence-webhooks': 'D',
  'GET /api/management/v1/licence-webhooks': 'D',
  'GET /api/management/v1/licence-webhooks/{id}': 'D',
  'PATCH /api/management/v1/licence-webhooks/{id}': 'D',
  'DELETE /api/management/v1/licence-webhooks/{id}': 'D',
  'GET /api/management/v1/licence-webhooks/{id}/deliveries': 'D',
  'GET /api/portal/v1/keys': 'P',
  'POST /api/portal/v1/licenses/{key}/activate': 'P',
  'POST /api/portal/v1/licenses/{key}/verify': 'P',
  'POST /api/portal/v1/licenses/{key}/deactivate': 'P',
  // Needs the session cookie itself (tested in auth.test.ts), and logout ends the session it is
  // called with: both are checked there rather than here.
  'GET /api/auth/v1/nonce': 'P',
  'POST /api/auth/v1/logout': 'A',
};
/** Bodies that pass validation where the capability is decided after it (per-entity rights). */
const bodies: Record<string, unknown> = {
  'POST /api/management/v1/records/{entity}/_bulk': [{ op: 'create', fields: { name: 'matrix' } }],
};
const skipped = new Set(['GET /api/auth/v1/nonce', 'POST /api/auth/v1/logout']);

const roles = ['anonymous', 'subscriber', 'editor', 'administrator'] as const;
type Role = (typeof roles)[number];
const allowed = (need: 'P' | 'A' | 'E' | 'D', role: Role) =>
  need === 'P' || (role !== 'anonymous' && (need === 'A' || (need === 'E' ? role !== 'subscriber' : role === 'administrator')));

let app: TestApp;
let doc: { paths: Record<string, Record<string, { requestBody?: unknown }>> };
const clients: Record<string, HttpClient> = {};

beforeAll(async () => {
  app = await startTestApp();
  doc = (await app.anonymous.get('/api/openapi.json')).body;
  const entity = await app.admin.post('/api/management/v1/entities', { slug: 'thing', name: 'Thing', schema: { fields: { name: { type: 'string' } } } });
  expect(entity.status).toBe(201);
  clients['anonymous:basic'] = app.anonymous;
  clients['administrator:basic'] = app.admin;
  for (const role of ['subscriber', 'editor', 'administrator'] as const) {
    const user = await app.createUser(role, `matrix-${role}`);
    if (role !== 'administrator') clients[`${role}:basic`] = user.client;
    const login = await app.anonymous.post('/api/auth/v1/login', { login: user.login, password: user.password });
    clients[`${role}:cookie`] = app.client({ cookie: (login.headers.get('set-cookie') ?? '').split(';')[0]!, nonce: login.body.data.nonce });
  }
  clients['anonymous:cookie'] = app.anonymous;
});
afterAll(async () => app?.close());

const fill = (path: string) =>
  // Entity routes get a slug that does not exist, so the administrator's DELETE in the walk
  // cannot remove the entity the record routes use.
  path
    .replace('{entity}', 'thing')
    .replace('{slug}', 'no-such-entity')
    .replace('{uuid}', '00000000-0000-4000-8000-000000000000')
    .replace(/\{[^}]+\}/g, '424242');

describe('authorization matrix', () => {
  it('lists every route of the OpenAPI document, and only those', () => {
    const documented = Object.entries(doc.paths).flatMap(([path, methods]) => Object.keys(methods).map((m) => `${m.toUpperCase()} ${path}`));
    expect(documented.sort()).toEqual(Object.keys(matrix).sort());
  });

  it.each(['basic', 'cookie'] as const)('answers each role as the table says (%s credentials)', async (via) => {
    const wrong: string[] = [];
    for (const [operation, need] of Object.entries(matrix)) {
      if (skipped.has(operation)) continue;
      const [method, path] = operation.split(' ') as [string, string];
      const hasBody = Boolean(doc.paths[path]?.[method.toLowerCase()]?.requestBody);
      for (const role of roles) {
        const res = await clients[`${role}:${via}`]!.request(method, fill(path), hasBody ? { body: bodies[operation] ?? {} } : {});
        const expected = allowed(need, role) ? 'allowed' : role === 'anonymous' ? 401 : 403;
        const ok = expected === 'allowed' ? res.status !== 401 && res.status !== 403 : res.status === expected;
        if (!ok) wrong.push(`${operation} as ${role}: ${res.status}, expected ${expected}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("answers 404 for another user's workflow and execution (agent sessions: agent.test.ts)", async () => {
    const owner = await app.createUser('editor', 'matrix-owner');
    const other = await app.createUser('editor', 'matrix-other');
    const workflow = await owner.client.post('/api/workflow/v1/workflows', {
      title: 'Private',
      trigger: { type: 'manual' },
      nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }],
    });
    const id = workflow.body.data.id;
    const started = await app.stack.services.executions.start(await app.stack.services.workflows.get('system', id), { payload: {}, trigger: 'manual' });
    for (const [method, path] of [
      ['GET', `/api/workflow/v1/workflows/${id}`],
      ['PATCH', `/api/workflow/v1/workflows/${id}`],
      ['POST', `/api/workflow/v1/workflows/${id}/run`],
      ['GET', `/api/workflow/v1/executions/${started.executionId}`],
      ['GET', `/api/workflow/v1/executions/${started.executionId}/nodes/a/items`],
    ] as const) {
      const res = await other.client.request(method, path, method === 'GET' ? {} : { body: method === 'PATCH' ? { title: 'x' } : {} });
      expect(res.status, `${method} ${path}`).toBe(404);
    }
  });
});
