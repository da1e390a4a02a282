import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { TARGET_HOST, eventually } from './helpers/http-target.js';
import { parseSse, providerConnection, shareConnections, startFakeAnthropic, startFakeOpenAi, type FakeProvider } from './helpers/fake-providers.js';

const A = '/api/agent/v1';
const EVENTS = ['token', 'tool_call', 'tool_result', 'gate_pending', 'done'];
let app: TestApp;
let openai: FakeProvider;
let anthropic: FakeProvider;
let openaiId: number;
let anthropicId: number;
let editor: TestUser;

const connection = (type: string, baseUrl: string, cred?: string) => providerConnection(app.admin, type, baseUrl, cred);

async function session(providerId: number) {
  const res = await editor.client.post(`${A}/sessions`, { provider_id: providerId, model_id: 'm-test' });
  expect(res.status, res.text).toBe(201);
  return res.body.data.session_id as string;
}

const say = (id: string, content: string, stream = false) => editor.client.post(`${A}/sessions/${id}/messages`, { content, stream });

async function stream(id: string, content: string) {
  const res = await say(id, content, true);
  expect(res.status, res.text).toBe(200);
  expect(res.headers.get('content-type')).toContain('text/event-stream');
  const events = parseSse(res.text);
  for (const e of events) expect(EVENTS).toContain(e.event);
  expect(events.at(-1)!.event).toBe('done');
  return events;
}

const tokens = (events: { event: string; data: any }[]) =>
  events
    .filter((e) => e.event === 'token')
    .map((e) => e.data.delta)
    .join('');

beforeAll(async () => {
  app = await startTestApp({ worker: true, env: { SVC_AGENT_PROVIDER_TIMEOUT_MS: '4000', SVC_AGENT_UPDATES_PER_RUN: '3' } });
  [openai, anthropic] = await Promise.all([startFakeOpenAi(), startFakeAnthropic()]);
  openaiId = await connection('openai', openai.url);
  anthropicId = await connection('anthropic', anthropic.url);
  editor = await app.createUser('editor');
  await shareConnections(app.admin, [openaiId, anthropicId], [editor]);
  const entity = await app.admin.post('/api/management/v1/entities', { slug: 'note', name: 'Note', schema: { fields: { title: { type: 'string' } } } });
  expect(entity.status, entity.text).toBe(201);
});
afterAll(async () => {
  await app?.close();
  await openai?.close();
  await anthropic?.close();
});

describe('event stream', () => {
  it('streams tokens, the tool call and its result, then done with streamed usage (OpenAI)', async () => {
    const id = await session(openaiId);
    openai.script({ text: 'Let me look that up.', toolCalls: [{ name: 'entities_list', args: {} }] }, { text: 'You have one entity: note.' });
    const events = await stream(id, 'What entities are there?');
    expect(openai.requests.at(-1)!.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    const kinds = events.map((e) => e.event);
    const call = kinds.indexOf('tool_call');
    const result = kinds.indexOf('tool_result');
    expect(call).toBeGreaterThan(0);
    expect(result).toBeGreaterThan(call);
    expect(kinds.slice(0, call).every((k) => k === 'token')).toBe(true);
    expect(kinds.slice(result + 1, -1).every((k) => k === 'token')).toBe(true);
    expect(tokens(events.slice(0, call))).toBe('Let me look that up.');
    expect(tokens(events.slice(result))).toBe('You have one entity: note.');
    expect(events[call]!.data).toEqual({ tool: 'entities_list', args: {} });
    expect(events[result]!.data).toMatchObject({ tool: 'entities_list', result: { items: [{ slug: 'note' }] } });
    expect(events.at(-1)!.data).toMatchObject({
      outcome: 'answered',
      assistant_message: 'You have one entity: note.',
      telemetry: { tokens_in: 22, tokens_out: 14, cost_usd: 0 },
    });
  });

  it('streams up to the gate (Anthropic), and the turn goes on after approval', async () => {
    const id = await session(anthropicId);
    anthropic.script(
      { text: 'Creating it.', toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'streamed' } } }] },
      { text: 'Done.' },
    );
    const events = await stream(id, 'Create a note');
    expect(events.map((e) => e.event).filter((k) => k !== 'token')).toEqual(['tool_call', 'gate_pending', 'done']);
    expect(tokens(events)).toBe('Creating it.');
    const pending = events.find((e) => e.event === 'gate_pending')!.data;
    expect(pending).toMatchObject({ tool: 'records_create', args: { entity: 'note', fields: { title: 'streamed' } } });
    expect(events.at(-1)!.data).toMatchObject({ outcome: 'gate_pending', telemetry: { tokens_in: 13, tokens_out: 5 } });
    const refused = await say(id, 'and now?', true);
    expect(refused.status).toBe(409);
    expect(refused.headers.get('content-type')).toContain('json');
    expect(refused.body.error).toBe('gate_pending');
    const approved = await editor.client.post(`${A}/actions/${pending.action_id}/approve`, { stream: true });
    expect(approved.headers.get('content-type')).toContain('text/event-stream');
    const after = parseSse(approved.text);
    expect(after.map((e) => e.event).filter((k) => k !== 'token')).toEqual(['tool_result', 'done']);
    expect(tokens(after)).toBe('Done.');
    expect(after.at(-1)!.data).toMatchObject({ outcome: 'answered', assistant_message: 'Done.' });
    expect((await app.sql('select * from records.e_note where title = $1', ['streamed'])).length).toBe(1);
  });

  it('forwards tokens as the provider produces them, and a client that leaves does not stop the turn', async () => {
    const id = await session(openaiId);
    openai.script({ text: 'one two three four five six seven eight', chunkDelayMs: 100 });
    const response = await fetch(`${app.url}${A}/sessions/${id}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Basic ' + Buffer.from(`${editor.login}:${editor.appPassword}`).toString('base64') },
      body: JSON.stringify({ content: 'count', stream: true }),
    });
    if (response.status !== 200) throw new Error(`The turn was not accepted: ${response.status} ${await response.text()}`);
    const reader = response.body!.getReader();
    let text = '';
    while (!text.includes('event: token')) {
      const { value, done } = await reader.read();
      // A stream that ended without a token fails here with what it said, rather than looping.
      if (done) throw new Error(`The event stream ended before any token: ${text}`);
      text += new TextDecoder().decode(value);
    }
    // The first token is here while the provider is still streaming the rest (8 chunks, 100 ms apart).
    expect(text).not.toContain('event: done');
    await reader.cancel();
    const history = await eventually(async () => {
      const view = await editor.client.get(`${A}/sessions/${id}`);
      return view.body.data.messages.find((m: any) => m.role === 'assistant')?.content;
    });
    expect(history).toBe('one two three four five six seven eight');
  });
});

describe('a long session', () => {
  it('continues as new between turns and keeps its whole conversation', async () => {
    const id = await session(anthropicId);
    for (let i = 1; i <= 4; i++) {
      anthropic.script({ text: `answer ${i}` });
      const res = await say(id, `question ${i}`);
      expect(res.body.data.assistant_message).toBe(`answer ${i}`);
    }
    // With SVC_AGENT_UPDATES_PER_RUN=3 the fourth turn ran in a continued run.
    const handle = app.stack.services.temporal.client.workflow.getHandle(`agent-session-${id}`);
    const started = (await handle.fetchHistory()).events![0]!.workflowExecutionStartedEventAttributes!;
    expect(started.continuedExecutionRunId).toBeTruthy();
    const history = (await editor.client.get(`${A}/sessions/${id}`)).body.data;
    expect(history.turn_count).toBe(4);
    // The model saw the earlier turns after continue-as-new.
    const lastRequest = anthropic.requests.at(-1)!.body.messages;
    expect(lastRequest).toHaveLength(7);
    expect(lastRequest[0].content[0].text).toBe('question 1');
  });
});

describe('a session whose workflow was terminated', () => {
  it('starts a new run on the next message and keeps the conversation', async () => {
    const id = await session(openaiId);
    openai.script({ text: 'first' });
    expect((await say(id, 'one')).body.data.assistant_message).toBe('first');
    await app.stack.services.temporal.client.workflow.getHandle(`agent-session-${id}`).terminate('operator');
    openai.script({ text: 'second' });
    const res = await say(id, 'two');
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.assistant_message).toBe('second');
    expect(openai.requests.at(-1)!.body.messages.filter((m: any) => m.role !== 'system')).toHaveLength(3);
  });
});

describe('provider faults', () => {
  it('reports a refused credential as provider_auth_failed; the session stays usable', async () => {
    const id = await session(openaiId);
    openai.script({ status: 401 });
    const res = await say(id, 'hi');
    expect(res.status).toBe(502);
    expect(res.body.error).toBe('provider_auth_failed');
    openai.script({ text: 'back again' });
    expect((await say(id, 'hi again')).body.data.assistant_message).toBe('back again');
  });

  it('retries a 429 with backoff and then answers', async () => {
    const id = await session(anthropicId);
    const before = anthropic.requests.length;
    anthropic.script({ status: 429 }, { text: 'after the retry' });
    const res = await say(id, 'hi');
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.assistant_message).toBe('after the retry');
    expect(anthropic.requests.length - before).toBe(2);
  });

  it('gives up after Temporal retried a provider that keeps answering 503', async () => {
    const id = await session(openaiId);
    const before = openai.requests.length;
    openai.script({ status: 503 }, { status: 503 }, { status: 503 }, { status: 503 });
    const res = await say(id, 'hi');
    expect(res.status).toBe(502);
    expect(res.body.error).toBe('provider_error');
    expect(res.body.message).toContain('503');
    expect(openai.requests.length - before).toBe(4);
  }, 30_000);

  it('reports a malformed stream as provider_error in done; the session stays usable', async () => {
    const id = await session(openaiId);
    openai.script({ malformed: true });
    const events = await stream(id, 'hi');
    expect(events.at(-1)!.data).toMatchObject({ outcome: 'failed', error: { code: 'provider_error' } });
    anthropic.script({ malformed: true });
    const other = await session(anthropicId);
    const res = await say(other, 'hi');
    expect(res.status).toBe(502);
    expect(res.body.error).toBe('provider_error');
    openai.script({ text: 'fine now' });
    expect((await stream(id, 'again')).at(-1)!.data).toMatchObject({ outcome: 'answered', assistant_message: 'fine now' });
  });

  it('reports an unreachable provider and a timeout as provider_error', async () => {
    const dead = await connection('openai', `http://${TARGET_HOST}:9`);
    await shareConnections(app.admin, [dead], [editor]);
    const res = await say(await session(dead), 'hi');
    expect(res.status).toBe(502);
    expect(res.body.error).toBe('provider_error');
    expect(res.body.message).toContain('unreachable');
    const id = await session(openaiId);
    openai.script({ text: 'too late', delayMs: 6000 });
    const slow = await say(id, 'hi');
    expect(slow.status).toBe(502);
    expect(slow.body.error).toBe('provider_error');
    openai.script({ text: 'quick' });
    expect((await say(id, 'hi')).body.data.assistant_message).toBe('quick');
  });
});

describe('what one user may hold open', () => {
  let capped: TestApp;
  let provider: FakeProvider;
  let providerId: number;
  beforeAll(async () => {
    capped = await startTestApp({ worker: true, env: { SVC_AGENT_MAX_SESSIONS_PER_HOUR: '2', SVC_AGENT_MAX_STREAMS_PER_USER: '1' } });
    provider = await startFakeOpenAi();
    providerId = await providerConnection(capped.admin, 'openai', provider.url);
  });
  afterAll(async () => {
    await capped?.close();
    await provider?.close();
  });

  it('sessions opened per hour are limited per user (429 with Retry-After); other users are not affected', async () => {
    const user = await capped.createUser('editor');
    const other = await capped.createUser('editor');
    await shareConnections(capped.admin, [providerId], [user, other]);
    const open = () => user.client.post(`${A}/sessions`, { provider_id: providerId, model_id: 'm' });
    expect((await open()).status).toBe(201);
    expect((await open()).status).toBe(201);
    const refused = await open();
    expect(refused.status).toBe(429);
    expect(refused.body.error).toBe('rate_limited');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(3000);
    expect((await other.client.post(`${A}/sessions`, { provider_id: providerId, model_id: 'm' })).status).toBe(201);
  });

  it('open event streams are limited per user: a second one waits for the first to end', async () => {
    const user = await capped.createUser('editor');
    await shareConnections(capped.admin, [providerId], [user]);
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) ids.push((await user.client.post(`${A}/sessions`, { provider_id: providerId, model_id: 'm' })).body.data.session_id);
    let release!: () => void;
    provider.script({ text: 'slow answer', until: new Promise<void>((r) => (release = r)) });
    const first = user.client.post(`${A}/sessions/${ids[0]}/messages`, { content: 'hi', stream: true });
    try {
      // The first stream is open while its model call is held.
      await eventually(async () => provider.requests.length > 0 || undefined);
      const second = await user.client.post(`${A}/sessions/${ids[1]}/messages`, { content: 'hi too', stream: true });
      expect(second.status).toBe(429);
      expect(second.body.error).toBe('rate_limited');
    } finally {
      release();
    }
    // Once the first stream ends, the next one is taken.
    expect((await first).status).toBe(200);
    const again = await user.client.post(`${A}/sessions/${ids[1]}/messages`, { content: 'now', stream: true });
    expect(again.status).toBe(200);
    expect(parseSse(again.text).at(-1)!.event).toBe('done');
  });
});
