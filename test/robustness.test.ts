import { execFile } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { temporalFailure } from '../src/temporal/connection.js';
import { startTestApp, type TestApp } from './helpers/app.js';

let app: TestApp;

/** Runs a command (without blocking the service in this process); its stdout. */
const run = (command: string, args: string[]) =>
  new Promise<{ stdout: string }>((resolve, reject) =>
    execFile(command, args, { maxBuffer: 1 << 20 }, (err, stdout) => (err ? reject(err) : resolve({ stdout }))),
  );
let operations: { method: string; path: string; hasBody: boolean }[];

beforeAll(async () => {
  app = await startTestApp();
  const doc = (await app.anonymous.get('/api/openapi.json')).body as { paths: Record<string, Record<string, { requestBody?: unknown }>> };
  operations = Object.entries(doc.paths).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, op]) => ({ method: method.toUpperCase(), path, hasBody: Boolean(op.requestBody) })),
  );
});
afterAll(async () => app?.close());

const fill = (path: string, value: string) => path.replace(/\{[^}]+\}/g, value);

/**
 * Walks every operation of the OpenAPI document with hostile input as an administrator: unknown
 * and malformed ids, malformed JSON, wrong types, a JSON array or scalar where an object belongs,
 * unknown query parameters, oversized pages. Every answer must be a documented 4xx in the
 * envelope (the client checks it against the document), never a 5xx.
 */
describe('hostile input on every route', () => {
  it('never answers 5xx, always the documented envelope', async () => {
    const seen: string[] = [];
    const check = async (label: string, method: string, path: string, options: Parameters<TestApp['admin']['request']>[2] = {}) => {
      const res = await app.admin.request(method, path, options);
      seen.push(`${label} ${method} ${path} -> ${res.status}`);
      expect(res.status, `${label} ${method} ${path}: ${res.text.slice(0, 300)}`).toBeLessThan(500);
      if (res.status >= 400 && (res.headers.get('content-type') ?? '').includes('json')) {
        expect(res.body.status, `${method} ${path}`).toBe('fail');
        expect(res.text).not.toMatch(/\n\s+at |node_modules|SELECT |select .* from /);
      }
      return res;
    };
    for (const op of operations) {
      if (op.path === '/api/temporal-codec/encode') continue; // encodes whatever it is given
      for (const id of ['999999', 'abc', '-1', '0x1f', "1'%20or%201=1", '%00', 'a'.repeat(300)]) {
        if (!op.path.includes('{')) break;
        await check('id', op.method, fill(op.path, id), op.hasBody ? { body: {} } : {});
      }
      const path = fill(op.path, '999999');
      await check('query', op.method, `${path}?per_page=100000&page=-3&unknown=1`, op.hasBody ? { body: {} } : {});
      if (!op.hasBody) continue;
      await check('malformed', op.method, path, { raw: '{"a": [1, 2', contentType: 'application/json' });
      await check('array', op.method, path, { body: [1, 2, 3] });
      await check('scalar', op.method, path, { raw: '42', contentType: 'application/json' });
      await check('types', op.method, path, { body: { title: 5, name: [], slug: {}, payload: 'x', content: 1, fields: 'no', site_url: 7, nodes: 'none' } });
      await check('nested', op.method, path, { body: JSON.parse('{"a":'.repeat(200) + '1' + '}'.repeat(200)) });
    }
    expect(seen.length).toBeGreaterThan(operations.length);
  }, 300_000);

  it('refuses a run wait outside its bounds with 400, and takes one within them', async () => {
    const created = await app.admin.post('/api/workflow/v1/workflows', {
      title: 'Wait bounds',
      trigger: { type: 'manual' },
      nodes: [{ id: 'a', type: 'transform', config: { value: { x: 1 } } }],
      edges: [],
    });
    const run = (query: string) => app.admin.post(`/api/workflow/v1/workflows/${created.body.data.id}/run?${query}`, { payload: null });
    for (const query of [
      'wait=true&timeout_ms=0',
      'wait=true&timeout_ms=-5',
      'wait=true&timeout_ms=120001',
      'wait=true&timeout_ms=abc',
      'wait=true&timeout_ms=1.5',
      'wait=maybe',
    ]) {
      const res = await run(query);
      expect(res.status, `${query}: ${res.text}`).toBe(400);
      expect(res.body).toMatchObject({ status: 'fail', error: 'validation_failed' });
    }
    // The lowest wait is taken (this app runs no worker: the run is still going when it ends).
    const bounded = await run('wait=true&timeout_ms=1');
    expect(bounded.status, bounded.text).toBe(202);
    expect(bounded.body.data.execution_id).toEqual(expect.any(Number));
  });
});

/**
 * Temporal answering that it does not know the service's namespace (a server that lost it for a
 * moment, or a namespace not yet registered) is Temporal being unavailable to the service: 503
 * with Retry-After on every path that asks it, never a 500.
 */
describe('a Temporal server that does not know the namespace', () => {
  it('answers 503 service_unavailable, with or without an Idempotency-Key, and keeps the record of the start that failed, its error shown to who asked for it', async () => {
    const lost = await startTestApp({ env: { TEMPORAL_NAMESPACE: `svc-missing-${process.pid}` } });
    try {
      const created = await lost.admin.post('/api/workflow/v1/workflows', {
        title: 'Namespace lost',
        trigger: { type: 'manual' },
        nodes: [{ id: 'a', type: 'transform', config: { value: { x: 1 } } }],
        edges: [],
      });
      expect(created.status).toBe(201);
      const id = created.body.data.id as number;
      const plain = await lost.admin.post(`/api/workflow/v1/workflows/${id}/run?wait=0&timeout_ms=1`, { payload: null });
      const keyed = await lost.admin.post(`/api/workflow/v1/workflows/${id}/run`, { payload: null }, { headers: { 'Idempotency-Key': 'lost-namespace-1' } });
      const again = await lost.admin.post(`/api/workflow/v1/workflows/${id}/run`, { payload: null }, { headers: { 'Idempotency-Key': 'lost-namespace-1' } });
      for (const res of [plain, keyed, again]) {
        expect(res.status, res.text).toBe(503);
        expect(res.body).toMatchObject({ status: 'fail', error: 'service_unavailable', data: { dependency: 'temporal' } });
        expect(res.headers.get('retry-after')).toBe('5');
      }
      // The keyed run's record says why it did not start, and the key still names it.
      const [record] = await lost.sql<{ status: string; error: { code: string } }>(
        `select e.status, e.error from executions e join idempotency_keys k on k.execution_id = e.id where k.key = 'lost-namespace-1'`,
      );
      expect(record).toMatchObject({ status: 'failed', error: { code: 'start_failed' } });
      // The record of a start that never happened was written by whoever asked for it: they see
      // why it failed, in the list as in the view (its people are worked out the same way there,
      // though no run has claimed it).
      const editor = await lost.createUser('editor');
      const shared = await lost.admin.post('/api/workflow/v1/workflows', {
        title: 'Namespace lost, shared',
        trigger: { type: 'manual' },
        nodes: [{ id: 'a', type: 'transform', config: { value: { x: 1 } } }],
        edges: [],
        shared_with: [editor.id],
      });
      expect((await editor.client.post(`/api/workflow/v1/workflows/${shared.body.data.id}/run`, { payload: null })).status).toBe(503);
      const listed = (await editor.client.get(`/api/workflow/v1/executions?workflow_id=${shared.body.data.id}`)).body.data.items;
      expect(listed).toHaveLength(1);
      const viewed = (await editor.client.get(`/api/workflow/v1/executions/${listed[0].id}`)).body.data;
      expect(viewed.error).toMatchObject({ code: 'start_failed', message: expect.stringContaining('Temporal is unavailable') });
      expect(listed[0].error).toEqual({
        code: viewed.error.code,
        message: viewed.error.message,
        ...(viewed.error.node_id ? { node_id: viewed.error.node_id } : {}),
      });
      // A schedule is Temporal's too: activating one asks it.
      const scheduled = await lost.admin.post('/api/workflow/v1/workflows', {
        title: 'Namespace lost, scheduled',
        trigger: { type: 'schedule', config: { cron: '0 3 * * *', overlap: 'skip' } },
        nodes: [{ id: 'a', type: 'transform', config: { value: { x: 1 } } }],
        edges: [],
      });
      const activate = await lost.admin.post(`/api/workflow/v1/workflows/${scheduled.body.data.id}/activate`);
      expect(activate.status, activate.text).toBe(503);
      expect(activate.body.error).toBe('service_unavailable');
      // Calls made on the workflow service directly (a replay's history read, its reset) get the
      // namespace's absence as a bare gRPC NOT_FOUND: it is still the server's state, never a run
      // gone past retention (which would turn a reset replay into a seeded new run).
      const history = (namespace: string, workflowId: string) =>
        lost.stack.services.temporal.client.workflowService.getWorkflowExecutionHistory({ namespace, execution: { workflowId } }).then(
          () => undefined,
          (err: unknown) => err,
        );
      const lostNamespace = await history(lost.stack.services.temporal.namespace, 'no-such-run');
      expect(temporalFailure(lostNamespace)?.kind).toBe('unavailable');
      const unknownRun = await history(app.stack.services.temporal.namespace, `no-such-run-${process.pid}`);
      expect(temporalFailure(unknownRun)?.kind).toBe('missing');
    } finally {
      await lost.close();
    }
  });
});

describe('a request line larger than the HTTP server accepts', () => {
  /** The statuses curl reads for `paths`, fetched one after the other on one kept-alive connection. */
  const statuses = async (paths: string[]): Promise<string[]> => {
    const urls = paths.flatMap((p) => ['-o', '/dev/null', `${app.url}${p}`]);
    const { stdout } = await run('curl', ['-sS', '--max-time', '20', '-w', '%{http_code}\\n', ...urls]);
    return stdout.trim().split('\n');
  };
  const huge = `/api/management/v1/records/a?eql=${'0'.repeat(6000)}&params=${'%F0%90%80%80'.repeat(6000)}`;

  it('is answered 431 and closed, on a new connection and on a kept-alive one, never reset', async () => {
    // Node's own handling destroys the connection while such a client still sends: it gets a reset.
    expect(await statuses([huge])).toEqual(['431']);
    expect(await statuses(['/healthz', huge])).toEqual(['200', '431']);
  });
});
