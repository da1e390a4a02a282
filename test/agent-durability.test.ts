import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorkerProcess, killProcess } from './helpers/worker-process.js';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';
import { parseSse, shareConnections, startFakeOpenAi, type FakeProvider } from './helpers/fake-providers.js';

// The API runs in this process without a worker; workers run in their own processes, as
// `svc worker` does in production, so streamed tokens cross processes through LISTEN/NOTIFY.
const A = '/api/agent/v1';
let app: TestApp;
let openai: FakeProvider;
let providerId: number;
let editor: TestUser;
const workers: ChildProcess[] = [];

function startWorker(): ChildProcess {
  const child = startWorkerProcess(app);
  workers.push(child);
  return child;
}

const kill = killProcess;

const notes = async () => Number((await app.sql<{ n: string }>('select count(*) as n from records.e_note'))[0]!.n);

beforeAll(async () => {
  app = await startTestApp({ worker: false });
  openai = await startFakeOpenAi();
  providerId = (await app.admin.post('/api/workflow/v1/connections', { type: 'openai', label: 'fake', cred: 'sk-x-1234', extra: { base_url: openai.url } }))
    .body.data.id;
  editor = await app.createUser('editor');
  await shareConnections(app.admin, [providerId], [editor]);
  expect((await app.admin.post('/api/management/v1/entities', { slug: 'note', name: 'Note', schema: { fields: { title: { type: 'string' } } } })).status).toBe(
    201,
  );
});
afterAll(async () => {
  await Promise.all(workers.map(kill));
  await app?.close();
  await openai?.close();
});

async function session(body: Record<string, unknown> = {}) {
  return (await editor.client.post(`${A}/sessions`, { provider_id: providerId, model_id: 'm', ...body })).body.data.session_id as string;
}

// The tests share one scripted model provider, whose answers they take in turn, and the worker
// process each leaves running for the next, so they run in this order even when shuffled.
describe('agent across processes', { shuffle: false }, () => {
  it('streams tokens produced in a worker process to the API process', async () => {
    startWorker();
    const id = await session();
    openai.script({ text: 'Checking the entities.', toolCalls: [{ name: 'entities_list', args: {} }] }, { text: 'There is a note entity.' });
    const res = await editor.client.post(`${A}/sessions/${id}/messages`, { content: 'entities?', stream: true });
    expect(res.status, res.text).toBe(200);
    const events = parseSse(res.text);
    const kinds = events.map((e) => e.event).filter((k) => k !== 'token');
    expect(kinds).toEqual(['tool_call', 'tool_result', 'done']);
    expect(
      events
        .filter((e) => e.event === 'token')
        .map((e) => e.data.delta)
        .join(''),
    ).toBe('Checking the entities.There is a note entity.');
    expect(events.at(-1)!.data).toMatchObject({ outcome: 'answered', assistant_message: 'There is a note entity.' });
  });

  it('keeps a pending gate across a worker restart; the tool runs once, after approval', async () => {
    const id = await session();
    const before = await notes();
    openai.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'durable' } } }] }, { text: 'Created after the restart.' });
    const gate = await editor.client.post(`${A}/sessions/${id}/messages`, { content: 'create one', stream: false });
    expect(gate.body.data.outcome).toBe('gate_pending');
    await Promise.all(workers.map(kill));
    startWorker();
    const approved = await editor.client.post(`${A}/actions/${gate.body.data.pending_action.action_id}/approve`, { note: 'go' });
    expect(approved.status, approved.text).toBe(200);
    expect(approved.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'Created after the restart.' });
    expect(await notes()).toBe(before + 1);
    const history = (await editor.client.get(`${A}/sessions/${id}`)).body.data.messages.map((m: any) => m.role);
    expect(history).toEqual(['user', 'assistant', 'decision', 'tool', 'assistant']);
  });

  it('finishes a turn whose worker was killed during the model call', async () => {
    const id = await session();
    const seen = openai.requests.length;
    openai.script({ text: 'slow', delayMs: 4000 }, { text: 'answered on the new worker' });
    const pending = editor.client.post(`${A}/sessions/${id}/messages`, { content: 'hello', stream: false });
    await eventually(async () => openai.requests.length > seen, 30_000, 'the model call');
    await Promise.all(workers.map(kill));
    startWorker();
    const res = await pending;
    expect(res.status, res.text).toBe(200);
    expect(['slow', 'answered on the new worker']).toContain(res.body.data.assistant_message);
    const assistants = (await editor.client.get(`${A}/sessions/${id}`)).body.data.messages.filter((m: any) => m.role === 'assistant');
    expect(assistants).toHaveLength(1);
  });

  it('expires a pending action by its durable timer although no worker ran at its deadline', async () => {
    startWorker();
    const id = await session({ gate_ttl_s: 3 });
    const before = await notes();
    openai.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'expires' } } }] });
    const gate = await editor.client.post(`${A}/sessions/${id}/messages`, { content: 'create one', stream: false });
    expect(gate.body.data.outcome).toBe('gate_pending');
    const actionId = gate.body.data.pending_action.action_id;
    await Promise.all(workers.map(kill));
    // The deadline passes while no worker runs; the timer lives in Temporal, not in a process.
    await eventually(
      async () => (await app.sql<{ past: boolean }>('select expires_at <= now() as past from agent_actions where action_id = $1', [actionId]))[0]?.past,
      30_000,
      'the action’s deadline to pass',
    );
    const late = await editor.client.get(`${A}/actions/${actionId}`);
    expect(late.body.data.status).toBe('pending');
    // Past its deadline it can no longer be decided, even before the timer's expiry is stored.
    const tooLate = await editor.client.post(`${A}/actions/${actionId}/approve`);
    expect(tooLate.status).toBe(409);
    expect(tooLate.body.error).toBe('action_expired');
    openai.script({ text: 'It expired, so nothing was created.' });
    startWorker();
    const action = await eventually(
      async () => {
        const a = (await editor.client.get(`${A}/actions/${actionId}`)).body.data;
        return a.status === 'expired' ? a : undefined;
      },
      60_000,
      'the expiry after the restart',
    );
    expect(action.decided_by).toBeNull();
    const history = await eventually(
      async () => {
        const messages = (await editor.client.get(`${A}/sessions/${id}`)).body.data.messages;
        return messages.at(-1)?.content === 'It expired, so nothing was created.' ? messages : undefined;
      },
      60_000,
      'the turn to go on',
    );
    expect(history.map((m: any) => m.role)).toEqual(['user', 'assistant', 'decision', 'tool', 'assistant']);
    expect(history[3].result_summary).toContain('expired');
    expect(await notes()).toBe(before);
    const approve = await editor.client.post(`${A}/actions/${actionId}/approve`);
    expect(approve.status).toBe(409);
    expect(approve.body.error).toBe('action_expired');
  });
});
