import { WorkflowUpdateFailedError, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { providerConnection, shareConnections, startFakeAnthropic, startFakeOpenAi, type FakeProvider } from './helpers/fake-providers.js';
import { eventually } from './helpers/http-target.js';

const A = '/api/agent/v1';
const M = '/api/management/v1';
let app: TestApp;
let openai: FakeProvider;
let anthropic: FakeProvider;
let openaiId: number;
let anthropicId: number;
let editor: TestUser;

const connection = (type: string, baseUrl: string, cred?: string) => providerConnection(app.admin, type, baseUrl, cred);

async function session(providerId: number, client = editor.client, model = 'gpt-test') {
  const res = await client.post(`${A}/sessions`, { provider_id: providerId, model_id: model });
  expect(res.status, res.text).toBe(201);
  return res.body.data.session_id as string;
}

const say = (id: string, content: string, client = editor.client) => client.post(`${A}/sessions/${id}/messages`, { content, stream: false });
const notes = async () => Number((await app.sql<{ n: string }>('select count(*) as n from records.e_note'))[0]!.n);

beforeAll(async () => {
  app = await startTestApp({
    worker: true,
    env: { SVC_AGENT_PRICES: JSON.stringify({ 'gpt-test': { in: 1, out: 2 } }), SVC_AGENT_MAX_MODEL_CALLS: '4', SVC_AGENT_MAX_TOOL_CALLS: '3' },
  });
  [openai, anthropic] = await Promise.all([startFakeOpenAi(), startFakeAnthropic()]);
  openaiId = await connection('openai', `${openai.url}`);
  anthropicId = await connection('anthropic', anthropic.url);
  editor = await app.createUser('editor');
  // The administrator's model connections are shared with the editor, who opens the sessions.
  await shareConnections(app.admin, [openaiId, anthropicId], [editor]);
  const entity = await app.admin.post(`${M}/entities`, { slug: 'note', name: 'Note', schema: { fields: { title: { type: 'string', required: true } } } });
  expect(entity.status, entity.text).toBe(201);
});
afterAll(async () => {
  await app?.close();
  await openai?.close();
  await anthropic?.close();
});

describe('sessions', () => {
  it('needs a model connection and a model', async () => {
    const bearer = await connection('http_bearer', openai.url);
    for (const body of [
      { provider_id: 999999, model_id: 'x' },
      { provider_id: bearer, model_id: 'x' },
      { provider_id: openaiId, model_id: '' },
      { provider_id: openaiId, model_id: '   ' },
    ]) {
      const res = await editor.client.post(`${A}/sessions`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error).toBe('invalid_request');
    }
  });

  it('answers a connection not shared with the caller exactly as one that does not exist', async () => {
    const unshared = await connection('openai', openai.url);
    const answer = async (id: number) => {
      const res = await editor.client.post(`${A}/sessions`, { provider_id: id, model_id: 'gpt-test' });
      return { status: res.status, body: JSON.parse(res.text.replaceAll(String(id), '<id>')) };
    };
    const [notShared, missing] = await Promise.all([answer(unshared), answer(unshared + 100_000)]);
    expect(notShared).toEqual(missing);
    expect(notShared).toMatchObject({ status: 400, body: { error: 'invalid_request', data: { field: 'provider_id' } } });
  });

  it('is visible to its owner and administrators only; subscribers may not use the agent', async () => {
    const id = await session(openaiId);
    const other = await app.createUser('editor');
    expect((await other.client.get(`${A}/sessions/${id}`)).status).toBe(404);
    expect((await say(id, 'hi', other.client)).status).toBe(404);
    expect((await app.admin.get(`${A}/sessions/${id}`)).status).toBe(200);
    expect((await editor.client.get(`${A}/sessions/not-a-uuid`)).status).toBe(404);
    const subscriber = await app.createUser('subscriber');
    expect((await subscriber.client.post(`${A}/sessions`, { provider_id: openaiId, model_id: 'm' })).status).toBe(403);
  });
});

describe('turns', () => {
  it('answers a plain message with telemetry from the provider usage and the price table', async () => {
    const id = await session(openaiId);
    openai.script({ text: 'Hello there.', usage: { in: 1000, out: 500 } });
    const res = await say(id, 'Hi!');
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({
      outcome: 'answered',
      assistant_message: 'Hello there.',
      tools_called: [],
      telemetry: { tokens_in: 1000, tokens_out: 500, cost_usd: 2 },
    });
    expect(res.body.data.telemetry.wall_ms).toBeGreaterThanOrEqual(0);
    const seen = openai.requests.at(-1)!;
    expect(seen.headers.authorization).toBe('Bearer sk-test-cred-1234');
    expect(seen.body.model).toBe('gpt-test');
    expect(seen.body.messages.at(-1)).toEqual({ role: 'user', content: 'Hi!' });
    expect(seen.body.tools.map((t: any) => t.function.name)).toContain('records_create');
    const view = await editor.client.get(`${A}/sessions/${id}`);
    expect(view.body.data).toMatchObject({
      model_id: 'gpt-test',
      turn_count: 1,
      price_known: true,
      totals: { tokens_in: 1000, tokens_out: 500, cost_usd: 2 },
      pending_action: null,
    });
    expect(view.body.data.messages.map((m: any) => [m.role, m.content])).toEqual([
      ['user', 'Hi!'],
      ['assistant', 'Hello there.'],
    ]);
  });

  it('runs a read tool at once, then answers (Anthropic)', async () => {
    await app.admin.post(`${M}/records/note`, { title: 'first' });
    const id = await session(anthropicId, editor.client, 'claude-test');
    anthropic.script(
      { toolCalls: [{ name: 'records_search', args: { entity: 'note', eql: 'title = :title', params: { title: 'first' } } }] },
      { text: 'There is one note: first.' },
    );
    const res = await say(id, 'Which notes are there?');
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({
      outcome: 'answered',
      assistant_message: 'There is one note: first.',
      telemetry: { tokens_in: 26, tokens_out: 10, cost_usd: 0 },
    });
    expect(res.body.data.tools_called).toHaveLength(1);
    expect(res.body.data.tools_called[0]).toMatchObject({
      name: 'records_search',
      args: { entity: 'note', eql: 'title = :title', params: { title: 'first' } },
    });
    expect(res.body.data.tools_called[0].result_summary).toContain('"total":1');
    expect(res.body.data.tools_called[0].result_summary).toContain('first');
    const second = anthropic.requests.at(-1)!;
    expect(second.headers['x-api-key']).toBe('sk-test-cred-1234');
    const toolResult = second.body.messages.at(-1).content[0];
    expect(toolResult).toMatchObject({ type: 'tool_result', tool_use_id: expect.stringMatching(/^toolu_/) });
    expect(toolResult.content).toContain('first');
    const view = await editor.client.get(`${A}/sessions/${id}`);
    expect(view.body.data).toMatchObject({ price_known: false, totals: { cost_usd: 0 } });
  });

  it('stops at the gate; the tool runs only after approval; a decision is taken once', async () => {
    const id = await session(openaiId);
    const before = await notes();
    openai.script(
      { text: 'I will create it.', toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'gated' } } }] },
      { text: 'Created the note.' },
    );
    const res = await say(id, 'Create a note called gated');
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.outcome).toBe('gate_pending');
    const action = res.body.data.pending_action;
    expect(action).toMatchObject({ tool: 'records_create', args: { entity: 'note', fields: { title: 'gated' } } });
    expect(action.summary).toContain('note');
    expect(await notes()).toBe(before);
    const view = await editor.client.get(`${A}/sessions/${id}`);
    expect(view.body.data.pending_action).toEqual(action);
    const busy = await say(id, 'and another thing');
    expect(busy.status).toBe(409);
    expect(busy.body.error).toBe('gate_pending');
    expect(await notes()).toBe(before);

    const approved = await editor.client.post(`${A}/actions/${action.action_id}/approve`, {});
    expect(approved.status, approved.text).toBe(200);
    expect(approved.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'Created the note.' });
    expect(approved.body.data.tools_called.map((t: any) => t.name)).toEqual(['records_create']);
    expect(await notes()).toBe(before + 1);
    for (const verb of ['approve', 'reject']) {
      const again = await editor.client.post(`${A}/actions/${action.action_id}/${verb}`, {});
      expect(again.status).toBe(409);
      expect(again.body.error).toBe('action_already_decided');
    }
    expect((await editor.client.post(`${A}/actions/00000000-0000-4000-8000-000000000000/approve`, {})).status).toBe(404);
    expect(await notes()).toBe(before + 1);
    const history = (await editor.client.get(`${A}/sessions/${id}`)).body.data.messages;
    expect(history.map((m: any) => m.role)).toEqual(['user', 'assistant', 'decision', 'tool', 'assistant']);
    expect(history[2].decision).toMatchObject({ action_id: action.action_id, approved: true });
  });

  it('rejects with a note: nothing runs and the model reads the rejection', async () => {
    const id = await session(openaiId);
    const before = await notes();
    openai.script(
      { toolCalls: [{ name: 'records_delete', args: { entity: 'note', uuid: '00000000-0000-4000-8000-000000000001' } }] },
      { text: 'Understood, I kept it.' },
    );
    const gate = await say(id, 'Delete that note');
    expect(gate.body.data.outcome).toBe('gate_pending');
    const other = await app.createUser('editor');
    expect((await other.client.post(`${A}/actions/${gate.body.data.pending_action.action_id}/reject`, {})).status).toBe(404);
    const res = await editor.client.post(`${A}/actions/${gate.body.data.pending_action.action_id}/reject`, { note: 'keep it, it is important' });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'Understood, I kept it.' });
    expect(res.body.data.tools_called[0].result_summary).toContain('keep it, it is important');
    const last = openai.requests.at(-1)!.body.messages.at(-1);
    expect(last.role).toBe('tool');
    expect(last.content).toContain('rejected');
    expect(last.content).toContain('keep it, it is important');
    expect(await notes()).toBe(before);
  });

  it('reaches two gates in one turn', async () => {
    const id = await session(openaiId);
    const before = await notes();
    openai.script(
      {
        toolCalls: [
          { name: 'records_create', args: { entity: 'note', fields: { title: 'one' } } },
          { name: 'records_create', args: { entity: 'note', fields: { title: 'two' } } },
        ],
      },
      { text: 'Made one of two.' },
    );
    const first = await say(id, 'Create two notes');
    expect(first.body.data.pending_action.args.fields.title).toBe('one');
    const second = await editor.client.post(`${A}/actions/${first.body.data.pending_action.action_id}/approve`, { note: 'fine' });
    expect(second.status, second.text).toBe(200);
    expect(second.body.data.outcome).toBe('gate_pending');
    expect(second.body.data.pending_action.args.fields.title).toBe('two');
    expect(await notes()).toBe(before + 1);
    const done = await editor.client.post(`${A}/actions/${second.body.data.pending_action.action_id}/reject`);
    expect(done.status, done.text).toBe(200);
    expect(done.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'Made one of two.' });
    expect(done.body.data.tools_called.map((t: any) => t.name)).toEqual(['records_create', 'records_create']);
    expect(await notes()).toBe(before + 1);
  });

  it('runs a workflow only after approval, as the session owner', async () => {
    const created = await editor.client.post('/api/workflow/v1/workflows', {
      title: `agent run ${Math.random()}`,
      trigger: { type: 'manual' },
      nodes: [{ id: 'echo', type: 'transform', config: { value: '{{ trigger.n }}' } }],
      edges: [],
    });
    expect(created.status, created.text).toBe(201);
    const workflowId = created.body.data.id as number;
    const runs = async () => Number((await app.sql<{ n: string }>('select count(*) as n from executions where workflow_id = $1', [workflowId]))[0]!.n);
    const id = await session(openaiId);
    openai.script({ toolCalls: [{ name: 'workflow_run', args: { workflow_id: workflowId, payload: { n: 7 } } }] }, { text: 'Started it.' });
    const gate = await say(id, 'run it');
    expect(gate.body.data.pending_action).toMatchObject({ tool: 'workflow_run', args: { workflow_id: workflowId, payload: { n: 7 } } });
    expect(await runs()).toBe(0);
    const done = await editor.client.post(`${A}/actions/${gate.body.data.pending_action.action_id}/approve`);
    expect(done.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'Started it.' });
    expect(done.body.data.tools_called[0].result_summary).toContain('execution_id');
    expect(await runs()).toBe(1);
    const [execution] = await app.sql<{ triggered_by: number }>('select triggered_by from executions where workflow_id = $1', [workflowId]);
    const [owner] = await app.sql<{ id: number }>('select id from users where login = $1', [editor.login]);
    expect(execution!.triggered_by).toBe(owner!.id);
  });

  it('lets a tool refusal reach the model as a result, not a failure', async () => {
    const subscriberSession = await app.createUser('editor');
    await shareConnections(app.admin, [openaiId], [subscriberSession]);
    const id = await session(openaiId, subscriberSession.client);
    openai.script(
      { toolCalls: [{ name: 'records_get', args: { entity: 'nope', uuid: '00000000-0000-4000-8000-000000000009' } }] },
      { text: 'No such entity.' },
    );
    const res = await say(id, 'read it', subscriberSession.client);
    expect(res.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'No such entity.' });
    expect(res.body.data.tools_called[0].result_summary).toMatch(/^error: /);
    expect(openai.requests.at(-1)!.body.messages.at(-1)).toMatchObject({ role: 'tool', content: expect.stringContaining('not_found') });
  });

  it('never runs an approved action twice: an attempt that finds it started reports the outcome unknown', async () => {
    const id = await session(openaiId);
    const before = await notes();
    openai.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'once' } } }] }, { text: 'I could not confirm it.' });
    const gate = await say(id, 'create once');
    const actionId = gate.body.data.pending_action.action_id;
    // As if an earlier attempt of the tool activity had started the call and its worker had died.
    await app.sql('update agent_actions set started_at = now() where action_id = $1', [actionId]);
    const res = await editor.client.post(`${A}/actions/${actionId}/approve`);
    expect(res.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'I could not confirm it.' });
    expect(res.body.data.tools_called[0].result_summary).toContain('may or may not have been carried out');
    expect(await notes()).toBe(before);
  });

  it('refuses a second message while a turn runs', async () => {
    const id = await session(openaiId);
    let release!: () => void;
    const seen = openai.requests.length;
    openai.script({ text: 'slow answer', until: new Promise<void>((r) => (release = r)) });
    const first = say(id, 'one');
    try {
      // The first turn is running once its model call arrives; the model answers when released.
      await eventually(async () => openai.requests.length > seen, 30_000, 'the first turn’s model call');
      const second = await say(id, 'two');
      expect(second.status).toBe(409);
      expect(second.body.error).toBe('turn_in_progress');
    } finally {
      release();
    }
    expect((await first).body.data.assistant_message).toBe('slow answer');
  });

  it('answers a turn without a stream once its answer is stored, with the outcome the workflow then completes the turn with', async () => {
    const id = await session(openaiId);
    const { client } = app.stack.services.temporal;
    const getHandle = client.workflow.getHandle.bind(client.workflow);
    // The update runs in the workflow as ever, but its outcome never reaches the API.
    const held = vi.spyOn(client.workflow, 'getHandle').mockImplementation((workflowId: string) => {
      const handle = getHandle(workflowId);
      return Object.assign(Object.create(handle) as WorkflowHandle, {
        executeUpdate: (...args: Parameters<WorkflowHandle['executeUpdate']>) => {
          handle.executeUpdate(...args).catch(() => undefined);
          return new Promise<never>(() => undefined);
        },
      });
    });
    let answer;
    try {
      openai.script({ toolCalls: [{ name: 'entities_list', args: {} }] }, { text: 'one entity: note', usage: { in: 7, out: 3 } });
      answer = await say(id, 'which entities?');
    } finally {
      held.mockRestore();
    }
    expect(answer.status, answer.text).toBe(200);
    expect(answer.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'one entity: note', tools_called: [{ name: 'entities_list' }] });
    const [user] = await app.sql<{ turn_id: string }>(`select turn_id from agent_messages where session_id = $1 and role = 'user'`, [id]);
    const completed = await getHandle(`agent-session-${id}`).getUpdateHandle(`message-${user!.turn_id}`).result();
    const { telemetry, ...rest } = answer.body.data;
    expect(completed).toMatchObject({ ...rest, telemetry: { tokens_in: telemetry.tokens_in, tokens_out: telemetry.tokens_out, cost_usd: telemetry.cost_usd } });
    // Its wall time runs to the answer's store, a moment before the workflow's next task.
    expect(telemetry.wall_ms).toBeLessThanOrEqual((completed as { telemetry: { wall_ms: number } }).telemetry.wall_ms);
  });

  it('takes a message refused only because the workflow is still completing the turn before, whose answer was given', async () => {
    const id = await session(openaiId);
    openai.script({ text: 'first' });
    expect((await say(id, 'one')).body.data.assistant_message).toBe('first');
    const { client } = app.stack.services.temporal;
    const getHandle = client.workflow.getHandle.bind(client.workflow);
    let refused = 0;
    // The first try of the next message meets the turn before still being completed, as the workflow refuses it then.
    const busy = vi.spyOn(client.workflow, 'getHandle').mockImplementation((workflowId: string) => {
      const handle = getHandle(workflowId);
      return Object.assign(Object.create(handle) as WorkflowHandle, {
        executeUpdate: (...args: Parameters<WorkflowHandle['executeUpdate']>) => {
          if (refused++ > 0) return handle.executeUpdate(...args);
          const failure = ApplicationFailure.create({ type: 'turn_in_progress', message: 'A turn of this session is still running', nonRetryable: true });
          return Promise.reject(new WorkflowUpdateFailedError('Workflow Update failed', failure));
        },
      });
    });
    try {
      openai.script({ text: 'second' });
      const res = await say(id, 'two');
      expect(res.status, res.text).toBe(200);
      expect(res.body.data.assistant_message).toBe('second');
      expect(refused).toBe(2);
      // While a turn's model call runs, its last message is the user's: a refusal then stays a 409.
      refused = 0;
      await app.sql(`update agent_messages set role = 'user', tool_calls = null where id = (select max(id) from agent_messages where session_id = $1)`, [id]);
      const again = await say(id, 'three');
      expect(again.status).toBe(409);
      expect(again.body.error).toBe('turn_in_progress');
      expect(refused).toBe(1);
    } finally {
      busy.mockRestore();
    }
  });

  it('ends a turn after the configured number of model calls', async () => {
    const id = await session(openaiId);
    const loop = { toolCalls: [{ name: 'entities_list', args: {} }] };
    openai.script(loop, loop, loop, loop);
    const res = await say(id, 'loop');
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.outcome).toBe('answered');
    expect(res.body.data.assistant_message).toContain('limit of 4 model calls');
    expect(res.body.data.tools_called).toHaveLength(4);
  });

  it('ends a turn whose model answer asks for more tool calls than SVC_AGENT_MAX_TOOL_CALLS, running none of them', async () => {
    const id = await session(openaiId);
    const search = { name: 'entities_list', args: {} };
    openai.script({ toolCalls: [search, search, search, search] });
    const res = await say(id, 'four at once');
    expect(res.status, res.text).toBe(502);
    expect(res.body).toMatchObject({ error: 'tool_call_limit', data: { tools_called: [] } });
    expect(res.body.message).toMatch(/4 tool calls in one answer; at most 3/);
    const view = (await editor.client.get(`${A}/sessions/${id}`)).body.data;
    expect(view.messages.filter((m: any) => m.role === 'tool')).toEqual([]);
    expect(view.messages.at(-1).telemetry.error).toMatchObject({ code: 'tool_call_limit' });
    // The session stays usable, and three calls in one answer are run.
    openai.script({ toolCalls: [search, search, search] }, { text: 'Three lists.' });
    const next = await say(id, 'three then');
    expect(next.status, next.text).toBe(200);
    expect(next.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'Three lists.' });
    expect(next.body.data.tools_called).toHaveLength(3);
  });

  it('stores sane token counts whatever the provider reports, and its GET keeps answering', async () => {
    const id = await session(openaiId);
    openai.script({ text: 'Odd usage.', usage: { in: 1.5, out: 1e308 } });
    const res = await say(id, 'count this');
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.telemetry).toMatchObject({ tokens_in: 2, tokens_out: 1_000_000_000 });
    openai.script({ text: 'Odder usage.', usage: { in: -3, out: 'many' } });
    expect((await say(id, 'and this')).body.data.telemetry).toMatchObject({ tokens_in: 0, tokens_out: 0 });
    // A count stored before counts were made sane does not break the session either.
    await app.sql(
      `insert into agent_messages (session_id, step_key, turn_id, role, content, telemetry) values ($1, 'model:legacy:0', gen_random_uuid(), 'assistant', 'old', $2)`,
      [id, JSON.stringify({ tokens_in: 1.5, tokens_out: 1e308, cost_usd: 'x' })],
    );
    const view = await editor.client.get(`${A}/sessions/${id}`);
    expect(view.status, view.text).toBe(200);
    expect(view.body.data.totals).toMatchObject({ tokens_in: 4, tokens_out: 2_000_000_000 });
    openai.script({ text: 'Still here.' });
    expect((await say(id, 'go on')).status).toBe(200);
  });

  it('refuses an oversized message with 413', async () => {
    const id = await session(openaiId);
    const res = await say(id, 'x'.repeat(33 * 1024));
    expect(res.status).toBe(413);
    expect(res.body.error).toBe('payload_too_large');
  });
});

describe('llm_prompt node', () => {
  it('calls the model through the same provider layer', async () => {
    const created = await app.admin.post('/api/workflow/v1/workflows', {
      title: `llm ${Math.random()}`,
      trigger: { type: 'manual' },
      nodes: [
        {
          id: 'ask',
          type: 'llm_prompt',
          connection_id: anthropicId,
          config: { model: 'claude-test', prompt: 'Summarise {{ trigger.topic }}', system: 'Be brief.' },
        },
      ],
      edges: [],
    });
    expect(created.status, created.text).toBe(201);
    anthropic.script({ text: 'A short summary.' });
    const run = await app.admin.post(`/api/workflow/v1/workflows/${created.body.data.id}/run?wait=true&timeout_ms=30000`, { payload: { topic: 'tides' } });
    expect(run.status, run.text).toBe(200);
    expect(run.body.data).toMatchObject({
      status: 'success',
      output: { text: 'A short summary.', model: 'claude-test', usage: { tokens_in: 13, tokens_out: 5 } },
    });
    expect(anthropic.requests.at(-1)!.body).toMatchObject({
      model: 'claude-test',
      system: 'Be brief.',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Summarise tides' }] }],
    });
  });
});
