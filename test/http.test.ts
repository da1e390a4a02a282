import { deflateSync, gzipSync } from 'node:zlib';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';

let app: TestApp;
const logs: string[] = [];

beforeAll(async () => {
  app = await startTestApp({ env: { SVC_BODY_LIMIT: '64kb' }, logs });
});
afterAll(async () => app?.close());

describe('envelope and conventions', () => {
  it('answers unknown routes 404 in the envelope', async () => {
    const res = await app.anonymous.get('/api/workflow/v1/nothing-here');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ status: 'fail', error: 'not_found', message: expect.any(String) });
  });

  it('answers 405 for a known path with the wrong method', async () => {
    const res = await app.anonymous.request('PUT', '/healthz', { unchecked: true });
    expect(res.status).toBe(405);
    expect(res.body.error).toBe('method_not_allowed');
  });

  it('answers malformed JSON 400 without echoing parser internals', async () => {
    const res = await app.admin.request('POST', '/api/auth/v1/app-passwords', { raw: '{"name": ', contentType: 'application/json' });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ status: 'fail', error: 'invalid_request' });
    expect(res.text).not.toMatch(/at |node_modules|SyntaxError/);
  });

  it('names every offending field on validation errors', async () => {
    const res = await app.admin.post('/api/auth/v1/app-passwords', { name: 42, extra: true });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('validation_failed');
    expect(res.body.data.errors.map((e: { field: string }) => e.field).sort()).toEqual(['extra', 'name']);
    expect(res.body.message).toContain('name');
  });

  it('answers a JSON scalar or a missing body 400', async () => {
    expect((await app.admin.request('POST', '/api/auth/v1/app-passwords', { raw: '"x"', contentType: 'application/json' })).status).toBe(400);
    expect((await app.admin.post('/api/auth/v1/app-passwords')).status).toBe(400);
  });

  it('answers 415 for a body in a content type the route does not take', async () => {
    const res = await app.admin.request('POST', '/api/auth/v1/app-passwords', { raw: 'name=x', contentType: 'text/plain' });
    expect(res.status).toBe(415);
    expect(res.body.error).toBe('unsupported_media_type');
  });

  it('answers 400, with no stack in the log, for a body whose Content-Encoding it is not in, on public routes too', async () => {
    const json = JSON.stringify({ name: 'compressed' });
    const before = logs.length;
    for (const encoding of ['gzip', 'deflate', 'br', 'x-gzip']) {
      for (const [client, path, raw, contentType] of [
        [app.admin, '/api/auth/v1/app-passwords', json, 'application/json'],
        [app.anonymous, '/api/workflow/v1/hooks/no-such-hook', json, 'application/json'],
        [app.anonymous, '/api/portal/v1/licenses/ABCD-EFGH/activate', 'domain=example.com', 'application/x-www-form-urlencoded'],
        // Truncated: a real gzip header, then nothing.
        [app.admin, '/api/auth/v1/app-passwords', gzipSync(json).subarray(0, 12), 'application/json'],
      ] as const) {
        const res = await client.request('POST', path, { raw, contentType, headers: { 'content-encoding': encoding }, unchecked: true });
        expect(res.status, `${encoding} ${path}: ${res.text}`).toBeGreaterThanOrEqual(400);
        expect(res.status, `${encoding} ${path}: ${res.text}`).toBeLessThan(500);
        expect(res.body).toMatchObject({ status: 'fail', error: expect.stringMatching(/^(invalid_request|unsupported_media_type)$/) });
        expect(res.text).not.toMatch(/at |node_modules|zlib|Z_DATA|header check/i);
      }
    }
    const written = logs.slice(before).join('\n');
    expect(written).not.toMatch(/"level":50|unhandled error|"stack"/);
    // A body really compressed the way it says is read.
    for (const [encoding, compress] of [
      ['gzip', gzipSync],
      ['deflate', deflateSync],
    ] as const) {
      const res = await app.admin.request('POST', '/api/auth/v1/app-passwords', {
        raw: compress(JSON.stringify({ name: `really ${encoding}` })),
        contentType: 'application/json',
        headers: { 'content-encoding': encoding },
      });
      expect(res.status, res.text).toBe(201);
    }
  });

  it('answers 413 for a body over the limit', async () => {
    const res = await app.admin.post('/api/auth/v1/app-passwords', { name: 'x'.repeat(100 * 1024) });
    expect(res.status).toBe(413);
    expect(res.body).toMatchObject({ status: 'fail', error: 'payload_too_large' });
  });

  it('answers 400 for unknown or repeated query parameters and bad path parameters', async () => {
    const unknown = await app.admin.get('/api/auth/v1/me?debug=1');
    expect(unknown.status).toBe(400);
    expect(unknown.body.data.errors[0].field).toBe('debug');
    const badId = await app.admin.delete('/api/auth/v1/app-passwords/abc');
    expect(badId.status).toBe(400);
    expect(badId.body.data.errors[0]).toMatchObject({ field: 'id', in: 'path' });
  });

  it('returns a request id on every response and keeps a sane incoming one', async () => {
    const generated = await app.anonymous.get('/healthz');
    expect(generated.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const kept = await app.anonymous.get('/healthz', { headers: { 'x-request-id': 'client-req-12345' } });
    expect(kept.headers.get('x-request-id')).toBe('client-req-12345');
    const replaced = await app.anonymous.get('/healthz', { headers: { 'x-request-id': 'bad id\twith spaces' } });
    expect(replaced.headers.get('x-request-id')).not.toContain(' ');
  });
});

describe('health', () => {
  it('reports liveness and readiness of PostgreSQL and Temporal', async () => {
    expect((await app.anonymous.get('/healthz')).body).toEqual({ status: 'ok', data: { live: true } });
    const ready = await app.anonymous.get('/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body.data).toEqual({ postgresql: 'up', temporal: 'up' });
  });
});

describe('OpenAPI document', () => {
  it('is a 3.1 document whose every schema compiles and that lists every route', async () => {
    const res = await app.anonymous.get('/api/openapi.json');
    expect(res.status).toBe(200);
    const doc = res.body;
    expect(doc.openapi).toBe('3.1.0');
    const ajv = new Ajv2020({ strict: false });
    ajv.addSchema(doc, 'doc');
    let operations = 0;
    for (const [path, methods] of Object.entries<Record<string, any>>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(methods)) {
        operations++;
        expect(op.operationId, `${method} ${path}`).toBeTruthy();
        for (const status of Object.keys(op.responses)) {
          const pointer = `doc#/paths/${path.replace(/~/g, '~0').replace(/\//g, '~1')}/${method}/responses/${status}`;
          expect(() => ajv.getSchema(pointer)).not.toThrow();
        }
      }
    }
    const routes = app.stack.server ? (await import('../src/http/app.js')).buildApp(app.stack.services).routes : [];
    expect(operations).toBe(routes.length);
    for (const route of routes) expect(doc.paths[route.path]?.[route.method], `${route.method} ${route.path}`).toBeDefined();
  });
});
