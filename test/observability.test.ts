import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { providerConnection, shareConnections, startFakeOpenAi, type FakeProvider } from './helpers/fake-providers.js';
import { eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';
import { issueLicense, portal } from './helpers/licenses.js';
import { freePorts } from './helpers/ports.js';
import { killProcess, startWorkerProcess } from './helpers/worker-process.js';

/**
 * Metrics and traces, checked with the real tools: Debian's Prometheus scrapes the API process and
 * a worker process and answers PromQL about what the test did; a loopback OTLP receiver gets the
 * spans of one run from the API through Temporal into its node and that node's HTTP call and SQL.
 */
const PROMETHEUS = '/usr/bin/prometheus';
const W = '/api/workflow/v1';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: { key: string; value: Record<string, unknown> }[];
}

let app: TestApp;
let worker: ChildProcess;
let workerMetrics: number;
let prometheus: ChildProcess;
let prometheusUrl: string;
let scratch: string;
let receiver: Server;
let target: HttpTarget;
let provider: FakeProvider;
let editor: TestUser;
const spans: OtlpSpan[] = [];
const logs: string[] = [];

/** OTLP/HTTP JSON ids are hex; some exporters send base64: both read as hex. */
const hex = (id: string | undefined) => (id && !/^[0-9a-f]+$/i.test(id) ? Buffer.from(id, 'base64').toString('hex') : (id ?? ''));

async function startReceiver(): Promise<string> {
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      if (req.url === '/v1/traces') {
        const payload = JSON.parse(body) as { resourceSpans?: { scopeSpans?: { spans?: OtlpSpan[] }[] }[] };
        for (const rs of payload.resourceSpans ?? [])
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? [])
              spans.push({ ...s, traceId: hex(s.traceId), spanId: hex(s.spanId), parentSpanId: hex(s.parentSpanId) || undefined });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((ok) => receiver.listen(0, '127.0.0.1', ok));
  return `http://127.0.0.1:${(receiver.address() as { port: number }).port}`;
}

async function promql(query: string): Promise<number | undefined> {
  const res = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(query)}`);
  const body = (await res.json()) as { data?: { result?: { value: [number, string] }[] } };
  const value = body.data?.result?.[0]?.value[1];
  return value === undefined ? undefined : Number(value);
}

/** Waits until Prometheus answers `query` with a value `accept` takes. */
const scraped = (query: string, accept: (v: number) => boolean = (v) => v >= 1) =>
  eventually(
    async () => {
      const value = await promql(query);
      return value !== undefined && accept(value) ? { value } : undefined;
    },
    60_000,
    `Prometheus: ${query}`,
  );

beforeAll(async () => {
  expect(existsSync(PROMETHEUS), `${PROMETHEUS} is missing: .ci/run installs Debian's prometheus package`).toBe(true);
  const otlp = await startReceiver();
  target = await startHttpTarget();
  provider = await startFakeOpenAi();
  // The API alone in this process; a worker of its own, in another, serves its metrics on a port.
  app = await startTestApp({ worker: false, logs, env: { OTEL_EXPORTER_OTLP_ENDPOINT: otlp, SVC_LICENSE_RATE_LIMIT: '1000' } });
  const [metricsPort, port] = await freePorts(2);
  workerMetrics = metricsPort!;
  worker = startWorkerProcess(app, { SVC_METRICS_PORT: String(workerMetrics), OTEL_EXPORTER_OTLP_ENDPOINT: otlp });
  await eventually(async () => (await fetch(`http://127.0.0.1:${workerMetrics}/metrics`)).ok || undefined, 120_000, 'the worker’s metrics port');

  scratch = await mkdtemp(join(tmpdir(), 'svc-prometheus-'));
  const config = [
    'global:',
    '  scrape_interval: 1s',
    'scrape_configs:',
    '  - job_name: api',
    `    static_configs: [{ targets: ['${new URL(app.url).host}'] }]`,
    '  - job_name: worker',
    `    static_configs: [{ targets: ['127.0.0.1:${workerMetrics}'] }]`,
  ].join('\n');
  await writeFile(join(scratch, 'prometheus.yml'), config);
  prometheusUrl = `http://127.0.0.1:${port}`;
  prometheus = spawn(
    PROMETHEUS,
    [`--config.file=${join(scratch, 'prometheus.yml')}`, `--storage.tsdb.path=${join(scratch, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
    { stdio: 'ignore' },
  );
  await eventually(async () => (await fetch(`${prometheusUrl}/-/ready`).catch(() => undefined))?.ok || undefined, 60_000, 'Prometheus to be ready');
  editor = await app.createUser('editor');
}, 240_000);

afterAll(async () => {
  if (prometheus) await killProcess(prometheus);
  if (worker) await killProcess(worker);
  await app?.close();
  await Promise.all([target?.close(), provider?.close(), new Promise((ok) => (receiver ? receiver.close(ok) : ok(undefined)))]);
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

describe('Prometheus scrapes the API and the worker', () => {
  it('sees a run, a node failure, a gated turn and a licence refusal move their series', async () => {
    const connection = await app.admin.post(`${W}/connections`, { type: 'http_bearer', label: 't', cred: 'c', extra: { base_url: target.url } });
    const good = await app.admin.post(`${W}/workflows`, {
      title: 'observed',
      trigger: { type: 'manual' },
      nodes: [{ id: 'call', type: 'http_request', connection_id: connection.body.data.id, config: { method: 'GET', path: '/seen' } }],
    });
    const bad = await app.admin.post(`${W}/workflows`, {
      title: 'fails',
      trigger: { type: 'manual' },
      nodes: [{ id: 'stop', type: 'fail', config: { message: 'no' } }],
    });
    expect((await app.admin.post(`${W}/workflows/${good.body.data.id}/run?wait=true&timeout_ms=60000`, { payload: {} })).body.data.status).toBe('success');
    expect((await app.admin.post(`${W}/workflows/${bad.body.data.id}/run?wait=true&timeout_ms=60000`, { payload: {} })).body.data.status).toBe('failed');

    const providerId = await providerConnection(app.admin, 'openai', provider.url);
    await shareConnections(app.admin, [providerId], [editor]);
    const entity = await app.admin.post('/api/management/v1/entities', { slug: 'memo', name: 'Memo', schema: { fields: { title: { type: 'string' } } } });
    expect(entity.status).toBe(201);
    const session = await editor.client.post('/api/agent/v1/sessions', { provider_id: providerId, model_id: 'm', approval: 'any' });
    provider.script({ toolCalls: [{ name: 'records_create', args: { entity: 'memo', fields: { title: 'observed' } } }] }, { text: 'Done.' });
    const turn = await editor.client.post(`/api/agent/v1/sessions/${session.body.data.session_id}/messages`, { content: 'make a memo', stream: false });
    expect(turn.body.data.outcome, turn.text).toBe('gate_pending');
    expect((await app.admin.post(`/api/agent/v1/actions/${turn.body.data.pending_action.action_id}/approve`)).status).toBe(200);

    const license = await issueLicense(app, { status: 'revoked' });
    expect((await portal(app.anonymous, license.token, 'verify')).status).toBe(403);

    await scraped('up{job="worker"}');
    await scraped('up{job="api"}');
    await scraped('sum(svc_runs_finished_total{job="worker",status="success"})');
    await scraped('sum(svc_node_attempts_total{job="worker",type="fail",outcome="failed",code="node_failed"})');
    await scraped('sum(svc_node_duration_seconds_count{job="worker",type="http_request",outcome="success"})');
    await scraped('sum(svc_runs_started_total{job="worker",trigger="manual"})', (v) => v >= 2);
    await scraped('sum(svc_agent_turns_total{job="api",outcome="gate_pending"})');
    await scraped('sum(svc_agent_turns_total{job="api",outcome="answered"})');
    await scraped('sum(svc_agent_actions_total{job="api",status="approved"})');
    await scraped('sum(svc_agent_decision_seconds_count{job="api",decision="approved"})');
    await scraped('sum(svc_model_tokens_total{job="worker",provider="openai",source="agent"})');
    await scraped('sum(svc_license_requests_total{job="api",endpoint="verify",outcome="license_inactive"})');
    await scraped('sum(svc_http_requests_total{job="api",route="/api/workflow/v1/workflows/:id/run",status="200"})', (v) => v >= 2);
    await scraped('svc_db_pool_connections{job="api",state="used"}', (v) => v >= 0);
    await scraped('svc_agent_pending_actions{job="api"}', (v) => v === 0);
    // The Temporal SDK's own metrics, from the worker's core, merged into its endpoint.
    await scraped('count(temporal_worker_task_slots_available{job="worker"})');
    await scraped('sum(process_cpu_seconds_total{job="worker"})', (v) => v > 0);
    // No label value is an id or a URL.
    const routes = (await (await fetch(`${prometheusUrl}/api/v1/label/route/values`)).json()) as { data: string[] };
    for (const route of routes.data) expect(route).not.toMatch(/\/\d+(\/|$)/);
  });

  it('serves /metrics to loopback clients, and refuses other callers without the metrics token', async () => {
    const res = await fetch(`${app.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    expect(await res.text()).toContain('svc_http_requests_total');
    const tokened = await startTestApp({ databaseUrl: app.databaseUrl, env: { SVC_METRICS_TOKEN: 'a-scraper-token-of-16+' } });
    try {
      expect((await fetch(`${tokened.url}/metrics`, { headers: { authorization: 'Bearer a-scraper-token-of-16+' } })).status).toBe(200);
    } finally {
      await tokened.close();
    }
  });
});

describe('OpenTelemetry traces', () => {
  it('follow one run from the API request through Temporal into its node, the node’s HTTP call and SQL', async () => {
    const connection = await app.admin.post(`${W}/connections`, { type: 'http_bearer', label: 'traced', cred: 'c', extra: { base_url: target.url } });
    const workflow = await app.admin.post(`${W}/workflows`, {
      title: 'traced',
      trigger: { type: 'manual' },
      nodes: [{ id: 'call', type: 'http_request', connection_id: connection.body.data.id, config: { method: 'GET', path: '/traced' } }],
    });
    const run = await app.admin.post(`${W}/workflows/${workflow.body.data.id}/run?wait=true&timeout_ms=60000`, { payload: {} });
    expect(run.body.data.status).toBe('success');
    const execution = (await app.admin.get(`${W}/executions/${run.body.data.execution_id}`)).body.data;
    const traceId = execution.trace_id as string;
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);

    /** The API request's span: the root every other span of the run leads back to. */
    const rootName = 'POST /api/workflow/v1/workflows/:id/run';
    const trace = await eventually(
      async () => {
        const mine = spans.filter((s) => s.traceId === traceId);
        const names = mine.map((s) => s.name);
        const complete =
          names.some((n) => n === rootName) &&
          names.some((n) => n.startsWith('RunWorkflow:')) &&
          names.some((n) => n === 'RunActivity:runNode') &&
          names.some((n) => n === 'HTTP GET') &&
          names.some((n) => n.startsWith('SQL '));
        // The two processes send their spans in batches: a child can arrive a batch before its parent.
        const ids = new Set(mine.map((s) => s.spanId));
        const parented = mine.every((s) => s.name === rootName || ids.has(s.parentSpanId ?? ''));
        return complete && parented ? mine : undefined;
      },
      60_000,
      'the run’s spans',
    );
    const byId = new Map(trace.map((s) => [s.spanId, s]));
    const root = trace.find((s) => s.name === rootName)!;
    const ancestry = (span: OtlpSpan): string[] => {
      const names: string[] = [];
      for (let s: OtlpSpan | undefined = span; s; s = s.parentSpanId ? byId.get(s.parentSpanId) : undefined) names.push(s.name);
      return names;
    };
    // Every span of the run leads back to the API request, through Temporal's spans.
    const http = trace.find((s) => s.name === 'HTTP GET')!;
    const chain = ancestry(http);
    expect(chain.at(-1)).toBe(root.name);
    expect(chain).toEqual(expect.arrayContaining(['RunActivity:runNode', root.name]));
    expect(chain.some((n) => n.startsWith('RunWorkflow:'))).toBe(true);
    const httpHost = http.attributes?.find((a) => a.key === 'server.address')?.value;
    expect(JSON.stringify(httpHost)).toContain('127.0.0.2');
    const sqlInActivity = trace.filter((s) => s.name.startsWith('SQL ') && ancestry(s).includes('RunActivity:runNode'));
    expect(sqlInActivity.length).toBeGreaterThan(0);
    for (const span of trace) if (span !== root) expect(byId.has(span.parentSpanId ?? ''), `${span.name} has its parent in the trace`).toBe(true);
    // The API's log line of the request names the trace.
    expect(logs.some((line) => line.includes(traceId) && line.includes('/api/workflow/v1/workflows/:id/run'))).toBe(true);
  });
});
