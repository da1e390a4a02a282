import type { temporal } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { basicAuth } from '../../bench/lib.js';
import { launchChromium } from '../helpers/browser.js';
import { parseSse, providerConnection } from '../helpers/fake-providers.js';
import { closedHistory } from '../helpers/history.js';
import { eventually } from '../helpers/http-target.js';
import { NEXT_DEPLOYMENT_MEMO, NEXT_DEPLOYMENT_PATCH } from './fixtures/workflows-next/index.js';
import { ADMIN_APP_PASSWORD, startSuite, type Suite } from './harness.js';
import { LoadRunner } from './load.js';

/**
 * The production topology as `npm run cluster` runs it (PostgreSQL, the Temporal server and Web
 * UI from their Go modules configured from deploy/, two APIs, two workers), driven as its
 * clients and operators would: requests spread over both APIs, then faults and a rolling
 * upgrade under a steady load, then the verdict over everything the suite was answered.
 */
const W = '/api/workflow/v1';
const A = '/api/agent/v1';
type History = temporal.api.history.v1.IHistory;

let s: Suite;
let failed = false;
const workflows: Record<string, { id: number; nodes: string[]; effects: string[] }> = {};
let providerId: number;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const worker = (i: 1 | 2) => s.cluster.workers[i - 1]!;

async function define(api: 1 | 2, name: string, body: Record<string, unknown>, effects: string[] = []): Promise<number> {
  const res = await s.api(api).post(`${W}/workflows`, { title: `cluster ${name}`, trigger: { type: 'manual' }, edges: [], ...body });
  expect(res.status, res.text).toBe(201);
  workflows[name] = { id: res.body.data.id, nodes: (body.nodes as { id: string }[]).map((n) => n.id), effects };
  return res.body.data.id;
}

const chain = (...ids: string[]) => ids.slice(1).map((to, i) => ({ from: ids[i]!, to }));

async function view(executionId: number, api: 1 | 2 = 1) {
  const res = await s.api(api).get(`${W}/executions/${executionId}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

const finished = (executionId: number, api: 1 | 2 = 1, timeoutMs = 90_000) =>
  eventually(
    async () => {
      const v = await view(executionId, api);
      return v.status !== 'running' ? v : undefined;
    },
    timeoutMs,
    `execution ${executionId} to finish`,
  );

async function historyOf(workflowId: string, runId?: string): Promise<History> {
  return s.temporal.workflow.getHandle(workflowId, runId).fetchHistory();
}

/** The history of a run whose record says it ended, once Temporal has closed it too (its last node ends the record a little before). */
const endedHistoryOf = (workflowId: string, runId?: string): Promise<History> => closedHistory(s.temporal.workflow.getHandle(workflowId, runId));

/** The identities of the workers that completed workflow tasks or started activities of a history. */
const identities = (history: History) =>
  new Set(
    (history.events ?? [])
      // A workflow task a worker began counts: a short call runs inside one, as a local activity.
      .flatMap((e) => [
        e.workflowTaskStartedEventAttributes?.identity,
        e.workflowTaskCompletedEventAttributes?.identity,
        e.activityTaskStartedEventAttributes?.identity,
      ])
      .filter((x): x is string => Boolean(x)),
  );

async function startRun(api: 1 | 2, workflow: string, payload: unknown = {}): Promise<number> {
  const res = await s.api(api).post(`${W}/workflows/${workflows[workflow]!.id}/run`, { payload });
  expect(res.status, res.text).toBe(202);
  return res.body.data.execution_id;
}

/** A run request that succeeded: how a fault window knows the API serves again. */
const accepts = async (api: 1 | 2) => (await s.api(api).post(`${W}/workflows/${workflows.tour!.id}/run`, { payload: { name: 'probe' } })).status === 202;

const notes = async (title: string) => Number((await s.sql<{ n: string }>('select count(*) as n from records.e_note where title = $1', [title]))[0]!.n);

async function session(api: 1 | 2, body: Record<string, unknown> = {}): Promise<string> {
  const res = await s.api(api).post(`${A}/sessions`, { provider_id: providerId, model_id: 'cluster-model', ...body });
  expect(res.status, res.text).toBe(201);
  return res.body.data.session_id;
}

beforeAll(async () => {
  s = await startSuite();
  const connection = await s.api(1).post(`${W}/connections`, {
    type: 'http_bearer',
    label: 'cluster target',
    cred: 'cluster-target-credential',
    extra: { base_url: s.targets.http.url },
  });
  expect(connection.status, connection.text).toBe(201);
  const hit = (id: string, path: string) => ({
    id,
    type: 'http_request',
    connection_id: connection.body.data.id,
    config: { method: 'POST', path: `${path}/{{ execution.id }}` },
  });
  await define(1, 'tour', {
    nodes: [
      { id: 'greet', type: 'transform', config: { value: { greeting: 'Hello, {{ trigger.name }}' } } },
      { id: 'wait', type: 'delay', config: { duration_ms: 1000 } },
      { id: 'shout', type: 'transform', config: { value: { text: '{{ $uppercase(nodes.greet.greeting) }}' } } },
    ],
    edges: chain('greet', 'wait', 'shout'),
  });
  await define(
    2,
    'effects',
    {
      nodes: [hit('first', '/slow/first'), { id: 'shape', type: 'transform', config: { value: '{{ trigger.n }}' } }, hit('second', '/second')],
      edges: chain('first', 'shape', 'second'),
    },
    ['first', 'second'],
  );
  await define(
    1,
    'delays',
    {
      nodes: [{ id: 'before', type: 'transform', config: { value: 1 } }, { id: 'pause', type: 'delay', config: { duration_ms: 4000 } }, hit('after', '/after')],
      edges: chain('before', 'pause', 'after'),
    },
    ['after'],
  );
  const hook = await s.api(2).post(`${W}/workflows`, {
    title: 'cluster hook',
    status: 'active',
    trigger: { type: 'webhook', config: { respond: 'last_node' } },
    nodes: [{ id: 'reply', type: 'transform', config: { value: { echo: '{{ trigger.ping }}' } } }],
    edges: [],
  });
  expect(hook.status, hook.text).toBe(201);
  workflows.hook = { id: hook.body.data.id, nodes: ['reply'], effects: [] };
  const entity = await s.api(1).post('/api/management/v1/entities', { slug: 'note', name: 'Note', schema: { fields: { title: { type: 'string' } } } });
  expect(entity.status, entity.text).toBe(201);
  providerId = await providerConnection(s.api(2), 'openai', s.targets.model.url);
}, 900_000);

afterEach((ctx) => {
  if (ctx.task.result?.state === 'fail') failed = true;
});

afterAll(async () => {
  await s?.close(failed);
}, 120_000);

describe('runs across two APIs', () => {
  let tourExecution: number;

  it('runs and waits on API 2 a workflow created on API 1, with its timeline on either', async () => {
    const res = await s.api(2).post(`${W}/workflows/${workflows.tour!.id}/run?wait=true&timeout_ms=60000`, { payload: { name: 'Ada' } });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({ status: 'success', output: { text: 'HELLO, ADA' } });
    tourExecution = res.body.data.execution_id;
    for (const api of [1, 2] as const) {
      const v = await view(tourExecution, api);
      expect(v.timeline.map((t: any) => [t.node_id, t.status, t.attempts])).toEqual([
        ['greet', 'success', 1],
        ['wait', 'success', 1],
        ['shout', 'success', 1],
      ]);
    }
  });

  it('answers a webhook on either API', async () => {
    const hook = (await s.api(1).get(`${W}/workflows/${workflows.hook!.id}`)).body.data;
    for (const api of [1, 2] as const) {
      const res = await fetch(`${s.url(api)}${W}/hooks/${hook.slug}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-webhook-secret': hook.webhook.secret },
        body: JSON.stringify({ ping: `pong-${api}` }),
      });
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ status: 'ok', data: { status: 'success', output: { echo: `pong-${api}` } } });
    }
    const rows = await s.sql<{ id: string }>('select id from executions where workflow_id = $1', [workflows.hook!.id]);
    expect(rows).toHaveLength(2);
    for (const row of rows) s.ledger.accept(Number(row.id), 'webhook');
  });

  it('replays on API 2, from a node, a run started on API 1', async () => {
    const started = await startRun(1, 'tour', { name: 'Grace' });
    expect((await finished(started, 1)).status).toBe('success');
    const replay = await s.api(2).post(`${W}/executions/${started}/replay`, { from_node_id: 'shout' });
    expect(replay.status, replay.text).toBe(202);
    const done = await finished(replay.body.data.execution_id, 2);
    expect(done).toMatchObject({ status: 'success', replay_of: started, output: { text: 'HELLO, GRACE' } });
    expect(Object.fromEntries(done.timeline.map((t: any) => [t.node_id, t.reused]))).toEqual({ greet: true, wait: true, shout: false });
  });

  it('gives one run to an Idempotency-Key retried across the two APIs, one after the other and at once', async () => {
    const run = (api: 1 | 2, key: string) =>
      s.api(api).request('POST', `${W}/workflows/${workflows.tour!.id}/run`, { body: { payload: { name: key } }, headers: { 'Idempotency-Key': key } });
    const first = await run(1, 'cluster-order-1');
    const again = await run(2, 'cluster-order-1');
    expect(first.status, first.text).toBe(202);
    expect(again.status, again.text).toBe(202);
    expect(again.body.data.execution_id).toBe(first.body.data.execution_id);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    const together = await Promise.all([run(1, 'cluster-order-2'), run(2, 'cluster-order-2'), run(1, 'cluster-order-2'), run(2, 'cluster-order-2')]);
    expect(together.map((r) => r.status)).toEqual([202, 202, 202, 202]);
    expect(new Set(together.map((r) => r.body.data.execution_id)).size).toBe(1);
    for (const key of ['cluster-order-1', 'cluster-order-2']) {
      const rows = await s.sql('select id from executions where workflow_id = $1 and trigger_payload->>$2 = $3', [workflows.tour!.id, 'name', key]);
      expect(rows, key).toHaveLength(1);
    }
  });
});

describe('the agent across processes', () => {
  it('streams a turn sent on API 1 up to the gate; approved on API 2, the rest of the turn streams there', async () => {
    const id = await session(1);
    s.targets.model.script(
      { text: 'Creating the note.', toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'cluster-streamed' } } }] },
      { text: 'Done.' },
    );
    const turn = await s.api(1).post(`${A}/sessions/${id}/messages`, { content: 'Create a note', stream: true });
    expect(turn.status, turn.text).toBe(200);
    const events = parseSse(turn.text);
    // Tokens produced in a worker process reach API 1 through PostgreSQL (LISTEN/NOTIFY).
    expect(events.map((e) => e.event).filter((k) => k !== 'token')).toEqual(['tool_call', 'gate_pending', 'done']);
    expect(
      events
        .filter((e) => e.event === 'token')
        .map((e) => e.data.delta)
        .join(''),
    ).toBe('Creating the note.');
    const actionId = events.find((e) => e.event === 'gate_pending')!.data.action_id;
    expect(await notes('cluster-streamed')).toBe(0);

    const approved = await s.api(2).post(`${A}/actions/${actionId}/approve`, { note: 'from API 2', stream: true });
    expect(approved.status, approved.text).toBe(200);
    const after = parseSse(approved.text);
    expect(after.map((e) => e.event).filter((k) => k !== 'token')).toEqual(['tool_result', 'done']);
    expect(after.at(-1)!.data).toMatchObject({ outcome: 'answered', assistant_message: 'Done.' });
    expect(await notes('cluster-streamed')).toBe(1);
    const history = (await s.api(2).get(`${A}/sessions/${id}`)).body.data.messages.map((m: any) => m.role);
    expect(history).toEqual(['user', 'assistant', 'decision', 'tool', 'assistant']);
  });

  it('expires a pending action on its durable timer while the worker that set the timer is gone', async () => {
    const id = await session(2, { gate_ttl_s: 4 });
    s.targets.model.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'cluster-expires' } } }] });
    const gate = await s.api(1).post(`${A}/sessions/${id}/messages`, { content: 'Create one', stream: false });
    expect(gate.body.data.outcome, gate.text).toBe('gate_pending');
    const actionId = gate.body.data.pending_action.action_id;
    // The workflow task that started the gate's timer names the worker that ran it.
    const events = (await historyOf(`agent-session-${id}`)).events ?? [];
    const timer = events.filter((e) => e.timerStartedEventAttributes).at(-1)!;
    const setBy = events.find((e) => Number(e.eventId) === Number(timer.timerStartedEventAttributes!.workflowTaskCompletedEventId))!
      .workflowTaskCompletedEventAttributes!.identity!;
    const gone = s.cluster.workers.find((w) => s.identity(w) === setBy)!;
    expect(gone, `the worker ${setBy}`).toBeDefined();
    const other = s.cluster.workers.find((w) => w !== gone)!;
    await gone.kill();
    s.targets.model.script({ text: 'It expired, so nothing was created.' });
    const action = await eventually(
      async () => {
        const a = (await s.api(2).get(`${A}/actions/${actionId}`)).body.data;
        return a.status === 'expired' ? a : undefined;
      },
      90_000,
      'the expiry on the remaining worker',
    );
    expect(action.decided_by).toBeNull();
    const messages = await eventually(async () => {
      const m = (await s.api(1).get(`${A}/sessions/${id}`)).body.data.messages;
      return m.at(-1)?.content === 'It expired, so nothing was created.' ? m : undefined;
    });
    expect(messages.map((m: any) => m.role)).toEqual(['user', 'assistant', 'decision', 'tool', 'assistant']);
    expect(await notes('cluster-expires')).toBe(0);
    // The timer fired into a workflow task the other worker ran.
    const later = (await historyOf(`agent-session-${id}`)).events ?? [];
    const fired = later.findIndex((e) => e.timerFiredEventAttributes);
    expect(fired).toBeGreaterThan(0);
    expect(later.slice(fired).some((e) => e.workflowTaskCompletedEventAttributes?.identity === s.identity(other))).toBe(true);
    await gone.start(s.logger);
  });
});

describe("the cluster's Temporal Web UI", () => {
  let browser: Browser | undefined;
  afterAll(async () => browser?.close());

  it("shows a run's input and result decoded through API 1's codec endpoint with the operator's application password", async () => {
    const marker = `cluster-${Math.random().toString(36).slice(2, 10)}`;
    const run = await s.api(2).post(`${W}/workflows/${workflows.tour!.id}/run?wait=true&timeout_ms=60000`, { payload: { name: marker } });
    expect(run.body.data.status, run.text).toBe('success');
    const uiUrl: string = (await view(run.body.data.execution_id)).temporal.ui_url;
    expect(uiUrl.startsWith(`${s.cluster.urls.ui}/namespaces/default/workflows/`)).toBe(true);
    browser = await launchChromium();
    const apiOrigin = `http://localhost:${new URL(s.url(1)).port}`;
    // The operator answers the browser's sign-in prompt for the API with an application password.
    const context = await browser.newContext({ httpCredentials: { username: 'admin', password: ADMIN_APP_PASSWORD, origin: apiOrigin } });
    const page = await context.newPage();
    const decodes: string[] = [];
    page.on('requestfinished', (req) => void (req.url().includes('/api/temporal-codec/decode') && decodes.push(req.url())));
    await page.goto(uiUrl);
    const text = () => page.locator('body').innerText();
    await expect.poll(text, { timeout: 60_000 }).toMatch(/Input[\s\S]*Result/);
    await expect.poll(async () => /could not connect|HELLO/.test(await text()), { timeout: 60_000 }).toBe(true);
    const shown = await text();
    expect(shown).not.toContain('Codec Server could not connect');
    expect(shown).toContain(marker);
    expect(shown).toContain(`HELLO, ${marker.toUpperCase()}`);
    expect(decodes.some((url) => url.startsWith(`${apiOrigin}/api/temporal-codec/decode`))).toBe(true);
  });
});

describe('faults under a steady load', () => {
  let load: LoadRunner;

  beforeAll(async () => {
    load = new LoadRunner(s.cluster.urls.apis, basicAuth('admin', ADMIN_APP_PASSWORD), workflows.effects!.id, s.ledger, 3);
    load.start();
    await eventually(async () => load.acceptedSince(0).length >= 6, 60_000, 'the load to get going');
  });

  it('a worker SIGKILLed mid-run: its runs finish on the other worker', async () => {
    // A burst on top of the load, caught in its slow first node: about half of it on each worker.
    const burst = await Promise.all(Array.from({ length: 10 }, (_, i) => startRun(i % 2 ? 2 : 1, 'effects', { n: -i })));
    await eventually(async () => burst.every((id) => s.targets.http.count(`/slow/first/${id}`) > 0), 30_000, 'the burst in its slow node');
    const dead = s.identity(worker(1));
    const killedAt = Date.now();
    await worker(1).kill();
    const views = await Promise.all(burst.map((id) => finished(id, 2, 120_000)));
    expect(views.map((v) => v.status)).toEqual(views.map(() => 'success'));
    // The dead worker had begun some of them; the other one finished them after it was gone.
    const survivor = s.identity(worker(2));
    const takenOver: number[] = [];
    for (const v of views) {
      const events = (await endedHistoryOf(v.temporal.workflow_id, v.temporal.run_id)).events ?? [];
      const at = (e: (typeof events)[number]) => Number(e.eventTime?.seconds ?? 0) * 1000 + (e.eventTime?.nanos ?? 0) / 1e6;
      const byDead = events.some((e) => identities({ events: [e] }).has(dead));
      const finishedBySurvivor = events.some((e) => at(e) > killedAt && e.workflowTaskCompletedEventAttributes?.identity === survivor);
      if (byDead && finishedBySurvivor) takenOver.push(v.id);
    }
    expect(takenOver.length).toBeGreaterThan(0);
    await worker(1).start(s.logger);
  });

  it('an API SIGKILLed: its clients retry on the other API with the same key and get one run each', async () => {
    const from = Date.now();
    await s.during(
      'api 1 down',
      async () => {
        await sleep(1500);
        await s.cluster.apis[0]!.kill();
        await sleep(5000);
        await s.cluster.apis[0]!.start(s.logger);
      },
      accepts,
    );
    const until = Date.now();
    const during = load.requests.filter((r) => r.startedAt >= from && r.startedAt <= until);
    await eventually(async () => during.every((r) => r.ids.size > 0), 60_000, 'every client to get its run');
    expect(during.filter((r) => r.ids.size !== 1)).toEqual([]);
    // Clients whose API went away were answered by the other one.
    expect(during.some((r) => r.attempts > 1 && r.answeredBy.at(-1) === 2)).toBe(true);
  });

  it('the Temporal server restarted: 503 while it is down, runs accepted again once it is back', async () => {
    const mark = s.ledger.entries.length;
    await s.during(
      'temporal restart',
      async () => {
        await s.cluster.temporal.stop();
        await sleep(6000);
        await s.cluster.temporal.start(s.logger);
      },
      accepts,
    );
    const answered = s.ledger.entries.slice(mark);
    expect(answered.some((e) => e.status === 503 && e.window === 'temporal restart')).toBe(true);
    const back = Date.now();
    await eventually(async () => load.acceptedSince(back).length >= 3, 60_000, 'runs accepted after the restart');
  });

  it('PostgreSQL restarted: 503 while it is down, runs accepted again once it is back', async () => {
    const mark = s.ledger.entries.length;
    await s.during(
      'postgresql restart',
      async () => {
        await s.cluster.postgres!.stop();
        await sleep(6000);
        await s.cluster.postgres!.start();
      },
      accepts,
    );
    expect(s.ledger.entries.slice(mark).some((e) => e.status === 503 && e.window === 'postgresql restart')).toBe(true);
    const back = Date.now();
    await eventually(async () => load.acceptedSince(back).length >= 3, 60_000, 'runs accepted after the restart');
  });

  describe('a rolling upgrade, under the same load', () => {
    it('moves worker 1, then worker 2, onto code with a patched() change while runs, delays and an agent session are in flight', async () => {
      const delays = await Promise.all([1, 2, 1, 2, 1, 2].map((api) => startRun(api as 1 | 2, 'delays')));
      await eventually(
        async () =>
          (await s.sql('select 1 from execution_nodes where node_id = $1 and status = $2 and execution_id = any($3)', ['before', 'success', delays])).length ===
          delays.length,
        60_000,
        'the runs to reach their delay',
      );
      const id = await session(1);
      s.targets.model.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'cluster-upgrade' } } }] });
      const gate = await s.api(1).post(`${A}/sessions/${id}/messages`, { content: 'Create it after the upgrade', stream: false });
      expect(gate.body.data.outcome, gate.text).toBe('gate_pending');

      await s.cluster.restart(worker(1), { SVC_WORKFLOW_BUNDLE: s.nextBundle });
      const between = await Promise.all([1, 2].map((api) => startRun(api as 1 | 2, 'delays')));
      await s.cluster.restart(worker(2), { SVC_WORKFLOW_BUNDLE: s.nextBundle });
      const upgraded = await Promise.all([1, 2].map((api) => startRun(api as 1 | 2, 'delays')));

      s.targets.model.script({ text: 'Created after the upgrade.' });
      const approved = await s.api(2).post(`${A}/actions/${gate.body.data.pending_action.action_id}/approve`);
      expect(approved.body.data, approved.text).toMatchObject({ outcome: 'answered', assistant_message: 'Created after the upgrade.' });
      expect(await notes('cluster-upgrade')).toBe(1);
      s.targets.model.script({ text: 'Still here.' });
      const next = await s.api(2).post(`${A}/sessions/${id}/messages`, { content: 'And now?', stream: false });
      expect(next.body.data, next.text).toMatchObject({ outcome: 'answered', assistant_message: 'Still here.' });

      const all = [...delays, ...between, ...upgraded];
      const views = await Promise.all(all.map((e) => finished(e, 2, 120_000)));
      for (const v of views)
        expect(
          v.timeline.map((t: any) => [t.node_id, t.status]),
          `execution ${v.id}`,
        ).toEqual([
          ['before', 'success'],
          ['pause', 'success'],
          ['after', 'success'],
        ]);
      // Runs in flight kept the old commands (no marker); runs begun on the new code carry it.
      const marked = async (v: any) => {
        for (const e of (await endedHistoryOf(v.temporal.workflow_id, v.temporal.run_id)).events ?? [])
          if (e.markerRecordedEventAttributes?.markerName === 'core_patch' && (await patchIdOf(e)) === NEXT_DEPLOYMENT_PATCH) return true;
        return false;
      };
      // While old and new workers shared the queue, a run the new code had begun could meet an old
      // worker, which fails that workflow task (nondeterminism) until a new worker takes it.
      let failedTasks = 0;
      for (const v of views)
        failedTasks += ((await endedHistoryOf(v.temporal.workflow_id, v.temporal.run_id)).events ?? []).filter(
          (e) => e.workflowTaskFailedEventAttributes,
        ).length;
      console.info(`rolling upgrade: ${failedTasks} failed workflow tasks in ${views.length} runs across the roll`);
      for (const v of views.slice(0, delays.length)) expect(await marked(v), `in-flight execution ${v.id}`).toBe(false);
      for (const v of views.slice(-upgraded.length)) {
        expect(await marked(v), `execution ${v.id} started after the upgrade`).toBe(true);
        const memo = (await s.temporal.workflow.getHandle(v.temporal.workflow_id, v.temporal.run_id).describe()).memo;
        expect(memo?.[NEXT_DEPLOYMENT_MEMO]).toBe('next');
      }
    });

    it('every closed history the suite made replays on the new code', async () => {
      const runs: { workflowId: string; runId?: string }[] = [];
      for await (const w of s.temporal.workflow.list({
        query: `(WorkflowType = 'runGraph' OR WorkflowType = 'agentSession') AND ExecutionStatus != 'Running'`,
      }))
        runs.push({ workflowId: w.workflowId, runId: w.runId });
      expect(runs.length).toBeGreaterThan(20);
      const histories = (async function* () {
        for (const r of runs) yield { workflowId: r.workflowId, history: await historyOf(r.workflowId, r.runId) };
      })();
      const failures: string[] = [];
      let replayed = 0;
      for await (const result of Worker.runReplayHistories(
        { workflowBundle: { codePath: s.nextBundle }, dataConverter: { payloadCodecs: [s.codec] } },
        histories,
      )) {
        replayed++;
        if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
      }
      expect(replayed).toBe(runs.length);
      expect(failures).toEqual([]);
    });
  });

  describe('the verdict', () => {
    it('every accepted run ended exactly once, no completed node ran twice, no gate decision lost, every timeline complete, no 5xx but 503 in a restart', async () => {
      await load.stop();
      expect(
        load.requests.filter((r) => r.ids.size === 0).map((r) => r.key),
        'clients that never got their run',
      ).toEqual([]);
      expect(
        load.requests.filter((r) => r.ids.size > 1).map((r) => r.key),
        'requests that got two runs',
      ).toEqual([]);
      const ids = [...s.ledger.executions.keys()];
      expect(ids.length).toBeGreaterThan(50);
      type Row = { id: string; workflow_id: string; status: string };
      const rows = await eventually(
        async () => {
          const r = await s.sql<Row>('select id, workflow_id, status from executions where id = any($1)', [ids]);
          return r.length === ids.length && r.every((x) => x.status !== 'running') ? r : undefined;
        },
        180_000,
        'every accepted run to end',
      );
      expect(rows.filter((r) => r.status !== 'success').map((r) => `${r.id}: ${r.status}`)).toEqual([]);
      // No run the suite was not answered for. A start answered 503 leaves its record closed as
      // start_failed (never run), for a retry with the same key to send again.
      type Other = { id: string; status: string; code: string | null; temporal_run_id: string | null };
      const others = (await s.sql<Other>(`select id, status, error->>'code' as code, temporal_run_id from executions`)).filter(
        (r) => !s.ledger.executions.has(Number(r.id)),
      );
      expect(others.filter((r) => !(r.status === 'failed' && r.code === 'start_failed' && r.temporal_run_id === null))).toEqual([]);
      const refusedStarts = s.ledger.entries.filter((e) => e.status === 503 && /\/run$/.test(e.path)).length;
      expect(others.length).toBeLessThanOrEqual(refusedStarts);

      // Timelines: every node of the workflow, once, successful; side effects no more often than attempts.
      type Node = { execution_id: string; node_id: string; status: string; attempts: number };
      const nodes = await s.sql<Node>('select execution_id, node_id, status, attempts from execution_nodes where execution_id = any($1)', [ids]);
      const problems: string[] = [];
      const byWorkflow = new Map(Object.values(workflows).map((w) => [w.id, w]));
      for (const row of rows) {
        const w = byWorkflow.get(Number(row.workflow_id))!;
        const mine = nodes.filter((n) => Number(n.execution_id) === Number(row.id));
        const ran = mine.map((n) => n.node_id).sort();
        if (JSON.stringify(ran) !== JSON.stringify([...w.nodes].sort())) problems.push(`execution ${row.id}: timeline ${ran.join(',')}`);
        for (const n of mine) if (n.status !== 'success') problems.push(`execution ${row.id}: ${n.node_id} ${n.status}`);
        for (const effect of w.effects) {
          const path = effect === 'first' ? `/slow/first/${row.id}` : `/${effect}/${row.id}`;
          const hits = s.targets.http.count(path);
          const attempts = mine.find((n) => n.node_id === effect)?.attempts ?? 0;
          if (hits < 1 || hits > attempts) problems.push(`execution ${row.id}: ${effect} performed ${hits} times for ${attempts} attempts`);
        }
      }
      expect(problems).toEqual([]);

      // Temporal: each execution's run completed, and no workflow id has more runs than executions.
      const perWorkflowId = new Map<string, number>();
      for (let i = 0; i < ids.length; i += 10) {
        await Promise.all(
          ids.slice(i, i + 10).map(async (id) => {
            const v = await view(id);
            const description = await s.temporal.workflow.getHandle(v.temporal.workflow_id, v.temporal.run_id).describe();
            expect(description.status.name, `execution ${id}`).toBe('COMPLETED');
            perWorkflowId.set(v.temporal.workflow_id, (perWorkflowId.get(v.temporal.workflow_id) ?? 0) + 1);
          }),
        );
      }
      for (const [workflowId, executions] of perWorkflowId) {
        let runs = 0;
        for await (const _ of s.temporal.workflow.list({ query: `WorkflowId = '${workflowId}'` })) runs++;
        expect(runs, workflowId).toBe(executions);
      }

      // Gate decisions the API confirmed are the ones stored.
      expect(s.ledger.decisions.size).toBeGreaterThan(1);
      for (const [actionId, verdict] of s.ledger.decisions) expect((await s.api(1).get(`${A}/actions/${actionId}`)).body.data.status, actionId).toBe(verdict);

      // Every answer a client got: 2xx-4xx, or 503 (or no answer from a killed API) inside a fault window.
      expect(s.ledger.violations(), `fault windows: ${JSON.stringify(s.ledger.windows)}`).toEqual([]);
      expect(s.ledger.entries.filter((e) => e.error === 'hang')).toEqual([]);
    });
  });
});

/** The id of a patch marker (its details are encoded by the service's codec like every payload). */
async function patchIdOf(event: temporal.api.history.v1.IHistoryEvent): Promise<string | undefined> {
  const payload = event.markerRecordedEventAttributes?.details?.['patch-data']?.payloads?.[0];
  if (!payload) return undefined;
  const [plain] = await s.codec.decode([payload as never]);
  return (JSON.parse(Buffer.from(plain!.data!).toString()) as { id?: string }).id;
}
