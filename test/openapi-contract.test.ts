import { execFile } from 'node:child_process';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { createConfig, lintFromString } from '@redocly/openapi-core';
import { Ajv2020 } from 'ajv/dist/2020.js';
import * as addFormatsModule from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/http/app.js';
import { answersWith, isErrorCode } from '../workflows/error-codes.js';
import type { AnyRoute } from '../src/http/route.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { OpenApiChecker } from './helpers/openapi-check.js';

/**
 * The OpenAPI document as a third party uses it: linted with Redocly's recommended rules, turned
 * into a typed client by openapi-typescript (with openapi-fetch, pinned in devDependencies) and
 * compiled by `tsc --strict`, with the names, unions, events and headers a client writer relies on.
 */

const run = promisify(execFile);
// ajv-formats is CommonJS; under ESM its function arrives as the namespace's default.
const addFormats = (addFormatsModule as unknown as { default: (ajv: Ajv2020) => void }).default;
const root = resolve(import.meta.dirname, '..');

type Json = Record<string, any>;
let app: TestApp;
let doc: Json;
let routes: AnyRoute[];
const operations = () =>
  Object.entries<Json>(doc.paths).flatMap(([path, methods]) => Object.entries<Json>(methods).map(([method, op]) => ({ path, method, op })));

beforeAll(async () => {
  app = await startTestApp();
  const res = await app.anonymous.get('/api/openapi.json');
  expect(res.status).toBe(200);
  doc = res.body;
  routes = buildApp(app.stack.services).routes;
});
afterAll(async () => app?.close());

/** The schemas a client writes code against; generated code has a type of each name. */
const named = [
  'Error',
  'JsonValue',
  'Workflow',
  'WorkflowSummary',
  'WorkflowCreate',
  'WorkflowUpdate',
  'Trigger',
  'Edge',
  'Node',
  ...[
    'HttpRequest',
    'Transform',
    'Condition',
    'Switch',
    'Delay',
    'RunWorkflow',
    'Fail',
    'RecordCreate',
    'RecordUpdate',
    'RecordQuery',
    'LlmPrompt',
    'WaitForEvent',
    'EmitEvent',
    'Approval',
  ].flatMap((t) => [`${t}Node`, `${t}NodeConfig`]),
  'WorkflowFile',
  'WorkflowFileNode',
  'RunWorkflowFileNode',
  'RunWorkflowFileNodeConfig',
  'WorkflowFileText',
  'WorkflowFilesRequest',
  'WorkflowApplyRequest',
  'WorkflowPlan',
  'WorkflowFileChange',
  'WorkflowApplyResult',
  'ExecutionStarted',
  'RunResult',
  'ReplayPlan',
  'ExpressionEvaluation',
  'Execution',
  'ExecutionSummary',
  'NodeError',
  'Connection',
  'CurrentUser',
  'User',
  'AppPassword',
  'Entity',
  'EntityCreate',
  'EntityUpdate',
  'FieldDefinition',
  'EntityRecord',
  'BulkOperation',
  'AgentSession',
  'AgentMessage',
  'AgentAction',
  'WorkflowApprovalAction',
  'GateAction',
  'EventToSend',
  'SentEvent',
  'CancelledExecution',
  'AgentTurnOutcome',
  'AgentPendingAction',
  'AgentStreamEvent',
  ...['Token', 'ToolCall', 'ToolResult', 'GatePending', 'Done'].map((e) => `AgentStreamEvent${e}`),
  'AgentDoneData',
  'AgentExpiredAction',
  'License',
  'IssuedLicense',
  'LicenseActivation',
  'LicenseSigningKey',
  'LicenceWebhook',
  'LicenceWebhookDelivery',
  'CodecPayloads',
];

describe('the OpenAPI document as a contract', () => {
  it("passes Redocly's recommended rules without an error", async () => {
    const config = await createConfig({ extends: ['recommended'] });
    const problems = await lintFromString({ source: JSON.stringify(doc), absoluteRef: 'openapi.json', config });
    const errors = problems.filter((p) => p.severity === 'error').map((p) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer}`);
    expect(errors).toEqual([]);
    // The one warning left: a private service has no licence to name.
    expect([...new Set(problems.map((p) => p.ruleId))]).toEqual(['info-license']);
  });

  it('names the schemas a client needs, and only with names of their own', () => {
    const names = Object.keys(doc.components.schemas);
    for (const name of named) expect(names, name).toContain(name);
    // No name made up by the generator for a part without one (a recursive schema, say).
    for (const name of names) expect(name).toMatch(/^(?!Recursive\d)[A-Z][A-Za-z]+$/);
  });

  it('describes and tags every operation, and declares the headers of every answer', () => {
    const tags = new Set(doc.tags.map((t: { name: string; description: string }) => t.description && t.name));
    expect(doc.servers).toHaveLength(1);
    for (const { path, method, op } of operations()) {
      const at = `${method.toUpperCase()} ${path}`;
      expect(op.description?.length ?? 0, at).toBeGreaterThan(20);
      expect(tags.has(op.tags[0]), at).toBe(true);
      for (const [status, response] of Object.entries<Json>(op.responses)) {
        if (status === '431') continue;
        expect(response.headers?.['X-Request-Id'], `${at} ${status}`).toBeDefined();
        if (status === '401') expect(response.headers['WWW-Authenticate'], at).toBeDefined();
        if (status === '429' || status === '503') expect(response.headers['Retry-After'], `${at} ${status}`).toBeDefined();
      }
    }
    const replayed = ['runWorkflow', 'callWebhook', 'replayExecution'];
    for (const { op } of operations().filter((o) => replayed.includes(o.op.operationId))) {
      for (const status of ['200', '202']) if (op.responses[status]) expect(op.responses[status].headers['Idempotent-Replayed'], op.operationId).toBeDefined();
    }
  });

  it('names the error codes of every error answer, each one the catalogue answers with that status', async () => {
    for (const { path, method, op } of operations()) {
      for (const [status, response] of Object.entries<Json>(op.responses)) {
        if (Number(status) < 400 || status === '431') continue;
        const at = `${method.toUpperCase()} ${path} ${status}`;
        const codes: string[] = response['x-error-codes'];
        expect(codes?.length, at).toBeGreaterThan(0);
        for (const code of codes) {
          expect(isErrorCode(code) && answersWith(code, Number(status)), `${at} ${code}`).toBe(true);
          // An error answer that is a page (text/html) names its codes only as x-error-codes.
          if (!response.content['application/json']?.schema.allOf) continue;
          expect(response.description, at).toContain(`\`${code}\``);
          expect(response.content['application/json'].schema.allOf[1].properties.error.enum, at).toEqual(codes);
        }
      }
    }
    // The test client refuses an answer whose code the operation does not name.
    const checker = new OpenApiChecker(doc);
    const body = (error: string) => ({ status: 'fail', error, message: 'x' });
    expect(checker.check('DELETE', '/api/workflow/v1/workflows/1', 409, 'application/json', body('not_archived'))).toEqual([]);
    expect(checker.check('DELETE', '/api/workflow/v1/workflows/1', 409, 'application/json', body('budget_exceeded'))).not.toEqual([]);
  });

  it('declares security exactly where an anonymous call is refused with 401', async () => {
    const wrong: string[] = [];
    for (const { path, method, op } of operations()) {
      const url = path.replace('{slug}', 'no-such-slug').replace(/\{[^}]+\}/g, '424242');
      const res = await app.anonymous.request(method.toUpperCase(), url, op.requestBody ? { body: {} } : {});
      const secured = op.security.length > 0;
      if (secured !== (res.status === 401)) wrong.push(`${method.toUpperCase()} ${path}: security ${JSON.stringify(op.security)}, anonymous ${res.status}`);
    }
    expect(wrong).toEqual([]);
  });

  it('has examples that match their schemas, and request examples the service accepts', () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(ajv);
    ajv.addSchema(doc, 'doc');
    let examples = 0;
    for (const [name, schema] of Object.entries<Json>(doc.components.schemas)) {
      for (const example of schema.examples ?? []) {
        examples++;
        const validate = ajv.compile({ $ref: `doc#/components/schemas/${name}` });
        expect(validate(example), `${name}: ${JSON.stringify(validate.errors)}`).toBe(true);
      }
    }
    expect(examples).toBeGreaterThanOrEqual(15);
    for (const route of routes) {
      const body = doc.paths[route.path][route.method].requestBody?.content?.['application/json']?.schema;
      const name = body?.$ref?.split('/').pop();
      for (const example of (name && doc.components.schemas[name].examples) ?? []) {
        const parsed = route.body!.safeParse(example);
        expect(parsed.success, `${route.operationId}: ${JSON.stringify(parsed.error?.issues)}`).toBe(true);
      }
    }
  });

  it('lets the test client check each event of a stream against its own schema', () => {
    const checker = new OpenApiChecker(doc);
    const path = '/api/agent/v1/sessions/s1/messages';
    const headers = new Headers({ 'x-request-id': 'request-0001' });
    const done = { outcome: 'answered', assistant_message: 'Hi', tools_called: [], telemetry: { tokens_in: 1, tokens_out: 1, wall_ms: 5, cost_usd: 0 } };
    const stream = (...events: [string, unknown][]) => events.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`).join('');
    expect(checker.check('POST', path, 200, 'text/event-stream', stream(['token', { delta: 'Hi' }], ['done', done]), headers)).toEqual([]);
    expect(
      checker.check('POST', path, 200, 'text/event-stream', stream(['token', { delta: 'Hi' }], ['done', { ...done, outcome: 'maybe' }]), headers),
    ).not.toEqual([]);
    expect(checker.check('POST', path, 200, 'text/event-stream', stream(['progress', {}]), headers)).not.toEqual([]);
    expect(checker.check('POST', path, 200, 'text/event-stream', stream(['done', done]), new Headers())).toEqual([
      'POST /api/agent/v1/sessions/{id}/messages 200: required header X-Request-Id is missing',
    ]);
  });

  it('generates a client with openapi-typescript that compiles under tsc --strict', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'svc-openapi-client-'));
    try {
      await symlink(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
      await run(process.execPath, [join(root, 'node_modules/openapi-typescript/bin/cli.js'), `${app.url}/api/openapi.json`, '-o', join(dir, 'schema.d.ts')]);
      await writeFile(join(dir, 'client.ts'), clientSource);
      const tsc = join(root, 'node_modules/typescript/bin/tsc');
      const compiled = await run(
        process.execPath,
        [tsc, '--strict', '--noEmit', '--target', 'es2022', '--module', 'nodenext', '--lib', 'es2023,dom', join(dir, 'client.ts')],
        {
          cwd: dir,
        },
      ).catch((err: { stdout: string }) => ({ stdout: err.stdout }));
      expect(compiled.stdout).toBe('');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

/**
 * Client code a third party would write against the generated types. Each `@ts-expect-error`
 * is a mistake the types must catch; an unused one is itself a compile error.
 */
const clientSource = `
import createClient from 'openapi-fetch';
import type { components, paths } from './schema.js';

type Schemas = components['schemas'];
${named.map((n) => `export type ${n} = Schemas['${n}'];`).join('\n')}

const client = createClient<paths>({ baseUrl: 'http://localhost:8080' });

export async function createAndRun(): Promise<string> {
  const created = await client.POST('/api/workflow/v1/workflows', {
    body: { title: 'Contract', trigger: { type: 'manual' }, nodes: [{ id: 'wait', type: 'delay', config: { duration_ms: 10 } }] },
  });
  if (created.error) return created.error.error;
  if (!created.data) return 'no body';
  const workflow: Workflow = created.data.data;
  const first: Node | undefined = workflow.nodes[0];
  if (first?.type === 'delay') first.config.duration_ms.toFixed();
  const started = await client.POST('/api/workflow/v1/workflows/{id}/run', {
    params: { path: { id: workflow.id }, header: { 'Idempotency-Key': 'retry-1' } },
    body: { payload: { name: 'Ada' } },
  });
  if (started.error) return started.error.message;
  if (!started.data) return 'no body';
  const execution = await client.GET('/api/workflow/v1/executions/{id}', { params: { path: { id: started.data.data.execution_id } } });
  const detail: Execution | undefined = execution.data?.data;
  return detail?.timeline.map((t) => t.node_id + ':' + t.status).join(',') ?? '';
}

// @ts-expect-error: not a node type
export const unknownType: Node = { id: 'a', type: 'no_such_type', config: {} };
// @ts-expect-error: a delay's config is {duration_ms}
export const wrongConfig: Node = { id: 'a', type: 'delay', config: { seconds: 1 } };
// @ts-expect-error: an http_request node needs its connection
export const noConnection: Node = { id: 'a', type: 'http_request', config: { method: 'GET', path: '/' } };
export const jsonField: FieldDefinition = { type: 'json', default: { nested: [1, 'two', { three: null }] } };

type Stream = paths['/api/agent/v1/sessions/{id}/messages']['post']['responses'][200]['content']['text/event-stream'];
type Turn = paths['/api/agent/v1/actions/{action_id}/approve']['post']['responses'][200]['content']['application/json']['data'];

/** What a client does with one parsed server-sent event. */
export function onEvent(event: Stream, turn: Turn): string {
  switch (event.event) {
    case 'token': {
      const data = JSON.parse(event.data) as Schemas['AgentTokenData'] | Schemas['AgentTruncatedEventData'];
      return 'delta' in data ? data.delta : data.preview;
    }
    case 'gate_pending':
      return (JSON.parse(event.data) as AgentPendingAction).action_id;
    case 'done': {
      const done = JSON.parse(event.data) as AgentDoneData;
      if (done.outcome === 'failed') return done.error.code;
      return (done.expired_actions ?? []).map((a: AgentExpiredAction) => a.action_id).join(',');
    }
    default:
      // A decider who is not the session's owner is answered the decision, not the turn.
      if (turn.outcome === 'decided') return turn.action.status;
      return turn.outcome === 'answered' ? turn.assistant_message : turn.pending_action.action_id;
  }
}

/** A client that takes JSON answers only: a turn's answer is then the outcome, never the stream. */
const json = createClient<paths, 'application/json'>({ baseUrl: 'http://localhost:8080' });
export async function say(id: string): Promise<string> {
  const { data } = await json.POST('/api/agent/v1/sessions/{id}/messages', { params: { path: { id } }, body: { content: 'hello' } });
  const outcome: AgentTurnOutcome | undefined = data?.data;
  return outcome?.outcome === 'gate_pending' ? outcome.pending_action.summary : (outcome?.assistant_message ?? '');
}

type RunAnswer = paths['/api/workflow/v1/workflows/{id}/run']['post']['responses'];
export const replayed: RunAnswer[202]['headers']['Idempotent-Replayed'] = 'true';
export const requestId: RunAnswer[202]['headers']['X-Request-Id'] = 'request-0001';
export const retryAfter: RunAnswer[429]['headers']['Retry-After'] = '5';
export const challenge: RunAnswer[401]['headers']['WWW-Authenticate'] = 'Basic realm="svc"';
`;
