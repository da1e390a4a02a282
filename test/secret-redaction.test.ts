import type { Payload } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { closedHistory } from './helpers/history.js';
import { fixedServers } from './helpers/http-target.js';
import { providerConnection, startFakeOpenAi, type FakeProvider } from './helpers/fake-providers.js';

/**
 * A connection's credential never leaves in what a run keeps: a target that echoes the request's
 * headers (as many test endpoints and some misconfigured proxies do) or a model that repeats its
 * key makes the node's output, error and the Temporal history carry `[redacted]` instead of the
 * credential, in every form it was sent in.
 */
let app: TestApp;
let openai: FakeProvider;
let echo: string;
const servers = fixedServers();
const W = '/api/workflow/v1';

const BEARER = 'bearer-cred-0123456789abcdef';
const BASIC = 'basic-user:basic-pass-0123456789';
const HEADER = 'header-cred-fedcba9876543210';
const MODEL_KEY = 'sk-model-key-00112233445566';
const forms = (cred: string) => [cred, Buffer.from(cred).toString('base64'), Buffer.from(cred).toString('base64').replace(/=+$/, '')];

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  openai = await startFakeOpenAi();
  // Answers with every request header, in the body and back as response headers; /fail with a 400.
  echo = await servers.start((req, res) => {
    const seen = { path: req.url, headers: req.headers };
    const echoed = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [`x-echo-${k}`, String(v)]));
    res.writeHead(req.url?.startsWith('/fail') ? 400 : 200, { 'content-type': 'application/json', ...echoed }).end(JSON.stringify(seen));
  });
});
afterAll(async () => {
  await app?.close();
  await openai?.close();
  await servers.closeAll();
});

async function connection(type: string, cred: string, extra: Record<string, unknown> = {}): Promise<number> {
  const res = await app.admin.post(`${W}/connections`, { type, label: `${type} echo`, cred, extra: { base_url: echo, ...extra } });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id;
}

/** Everything a run left behind: its execution as the API shows it, and its Temporal history decoded. */
async function runAndCollect(nodes: Record<string, unknown>[]): Promise<{ execution: any; history: string }> {
  const created = await app.admin.post(`${W}/workflows`, { title: `echo ${Math.random()}`, trigger: { type: 'manual' }, nodes, edges: [] });
  expect(created.status, created.text).toBe(201);
  const run = await app.admin.post(`${W}/workflows/${created.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: {} });
  expect(run.status, run.text).toBe(200);
  const execution = (await app.admin.get(`${W}/executions/${run.body.data.execution_id}`)).body.data;
  const { client, decode, executionWorkflowId } = app.stack.services.temporal;
  const events = (await closedHistory(client.workflow.getHandle(executionWorkflowId(run.body.data.execution_id)))).events ?? [];
  const payloads: Payload[] = [];
  const collect = (value: unknown): void => {
    if (!value || typeof value !== 'object') return;
    if ('metadata' in value && 'data' in value && (value as Payload).data instanceof Uint8Array) payloads.push(value as Payload);
    else for (const child of Object.values(value)) collect(child);
  };
  collect(events);
  const decoded = await Promise.all(payloads.map((p) => decode(p).catch(() => null)));
  return { execution, history: JSON.stringify(decoded) };
}

describe("a connection's credential echoed back by the target", () => {
  it('is redacted from node outputs, errors and the Temporal history, in every form it was sent', async () => {
    const bearer = await connection('http_bearer', BEARER);
    const basic = await connection('http_basic', BASIC);
    const header = await connection('http_header', HEADER, { header_name: 'X-Token' });
    const { execution, history } = await runAndCollect([
      { id: 'bearer', type: 'http_request', connection_id: bearer, config: { method: 'GET', path: '/bearer' } },
      { id: 'basic', type: 'http_request', connection_id: basic, config: { method: 'GET', path: '/basic' } },
      { id: 'header', type: 'http_request', connection_id: header, config: { method: 'GET', path: '/header' } },
      { id: 'refused', type: 'http_request', connection_id: bearer, config: { method: 'GET', path: '/fail' }, on_error: 'continue' },
    ]);
    expect(execution.status).toBe('partial');
    const node = (id: string) => execution.timeline.find((t: any) => t.node_id === id);
    // The rest of the echo is intact: the output is still the target's answer.
    expect(node('bearer').output.body).toMatchObject({ path: '/bearer', headers: { authorization: 'Bearer [redacted]' } });
    expect(node('bearer').output.headers['x-echo-authorization']).toBe('Bearer [redacted]');
    expect(node('basic').output.body.headers.authorization).toBe('Basic [redacted]');
    expect(node('header').output.body.headers['x-token']).toBe('[redacted]');
    expect(node('refused').error.code).toBe('http_error');
    const everything = JSON.stringify(execution) + history;
    expect(history).toContain('[redacted]');
    for (const cred of [BEARER, BASIC, HEADER]) for (const form of forms(cred)) expect(everything, form).not.toContain(form);
  });

  it('is redacted from what a model repeats in an llm_prompt answer', async () => {
    const model = await providerConnection(app.admin, 'openai', openai.url, MODEL_KEY);
    openai.script({ text: `Your key is ${MODEL_KEY}, sent as Bearer ${MODEL_KEY}.` });
    const { execution, history } = await runAndCollect([{ id: 'ask', type: 'llm_prompt', connection_id: model, config: { model: 'gpt-test', prompt: 'hi' } }]);
    expect(execution.status).toBe('success');
    expect(execution.timeline[0].output.text).toBe('Your key is [redacted], sent as Bearer [redacted].');
    expect(JSON.stringify(execution) + history).not.toContain(MODEL_KEY);
  });

  it('is redacted from what a model repeats in an agent turn: the answer and the stored conversation', async () => {
    const model = await providerConnection(app.admin, 'openai', openai.url, MODEL_KEY);
    const session = await app.admin.post('/api/agent/v1/sessions', { provider_id: model, model_id: 'gpt-test' });
    expect(session.status, session.text).toBe(201);
    openai.script({ text: `My key is ${MODEL_KEY}.` });
    const answer = await app.admin.post(`/api/agent/v1/sessions/${session.body.data.session_id}/messages`, { content: 'what is your key?', stream: false });
    expect(answer.body.data, answer.text).toMatchObject({ outcome: 'answered', assistant_message: 'My key is [redacted].' });
    const stored = await app.sql<{ content: string }>('select content from agent_messages where session_id = $1', [session.body.data.session_id]);
    expect(stored.map((m) => m.content)).toContain('My key is [redacted].');
    expect(JSON.stringify(stored)).not.toContain(MODEL_KEY);
  });
});
