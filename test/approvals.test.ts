import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';

/**
 * The approval node on the agent's gate, against the real servers: one inbox and one decision
 * endpoint, distinct approvers, no self-approval for the people a run acts for (administrators
 * included), edits checked by the node's JSON Schema, expiry, reminders and escalation through a
 * connection, a cancelled run's approval, and the races (two approvers at once, a decision and the
 * expiry at once).
 */

let app: TestApp;
let owner: TestUser;
let manager: TestUser;
let finance: TestUser;
let boss: TestUser;
let stranger: TestUser;
let chat: HttpTarget;
let chatConnection: number;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';
const A = '/api/agent/v1/actions';

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  [owner, manager, finance, boss, stranger] = [
    await app.createUser('editor', 'ada'),
    await app.createUser('editor', 'grace'),
    await app.createUser('editor', 'linus'),
    await app.createUser('editor', 'barbara'),
    await app.createUser('editor', 'mallory'),
  ];
  chat = await startHttpTarget();
  const connection = await app.admin.post('/api/workflow/v1/connections', {
    type: 'http_bearer',
    label: 'chat webhook',
    cred: 'chat-webhook-secret-token',
    extra: { base_url: chat.url },
    shared_with: [owner.id],
  });
  expect(connection.status, connection.text).toBe(201);
  chatConnection = connection.body.data.id;
});
afterAll(async () => {
  await app?.close();
  await chat?.close();
});

type Approval = Record<string, unknown>;

/** The expense workflow: over 1,000 asks for an approval; approved pays, rejected and expired refuse. */
async function expenseWorkflow(approval: Approval = {}, client = owner.client) {
  const res = await client.post(W, {
    title: `expense ${Math.random()}`,
    trigger: { type: 'manual' },
    nodes: [
      { id: 'big', type: 'condition', config: { expression: '{{ trigger.amount > 1000 }}' } },
      {
        id: 'manager',
        type: 'approval',
        config: {
          summary: 'Expense of {{ trigger.amount }} EUR by {{ trigger.by }}',
          details: { purpose: '{{ trigger.purpose }}' },
          fields: { amount: '{{ trigger.amount }}', purpose: '{{ trigger.purpose }}' },
          editable: { type: 'object', properties: { amount: { type: 'number', minimum: 0, maximum: 5000 } }, required: ['amount'] },
          approvers: { users: ['grace'] },
          timeout_ms: 120_000,
          ...approval,
        },
      },
      { id: 'pay', type: 'transform', config: { value: { paid: '{{ nodes.manager.fields.amount }}' } } },
      { id: 'refuse', type: 'transform', config: { value: { refused: '{{ nodes.manager.decision }}' } } },
    ],
    edges: [
      { from: 'big', to: 'manager', branch: 'true' },
      { from: 'manager', to: 'pay', branch: 'approved' },
      { from: 'manager', to: 'refuse', branch: 'rejected' },
      { from: 'manager', to: 'refuse', branch: 'expired' },
    ],
  });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function start(workflowId: number, payload: unknown = { amount: 1800, by: 'ada', purpose: 'Conference' }, client = owner.client) {
  const res = await client.post(`${W}/${workflowId}/run`, { payload });
  expect(res.status, res.text).toBe(202);
  return res.body.data.execution_id as number;
}

/** The run's pending action, once its approval node opened it. */
const actionOf = (executionId: number) =>
  eventually(
    async () => {
      const [row] = await app.sql<{ action_id: string; status: string }>(`select action_id, status from agent_actions where execution_id = $1`, [executionId]);
      return row;
    },
    60_000,
    `the approval of execution ${executionId}`,
  );

async function finished(executionId: number) {
  return eventually(
    async () => {
      const v = (await app.admin.get(`${E}/${executionId}`)).body.data;
      return v.status !== 'running' ? v : undefined;
    },
    90_000,
    `execution ${executionId} to finish`,
  );
}

const nodeOf = (view: { timeline: { node_id: string }[] }, id: string) => view.timeline.find((t) => t.node_id === id) as Record<string, any>;
const approve = (user: TestUser, actionId: string, body: unknown = {}) => user.client.post(`${A}/${actionId}/approve`, body);
const reject = (user: TestUser, actionId: string, body: unknown = {}) => user.client.post(`${A}/${actionId}/reject`, body);

describe('saving an approval node', () => {
  it('names each problem: an invalid editable schema, an unknown login, too few approvers, reminders without notify, a connection not shared', async () => {
    const foreign = (
      await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 'admin only', cred: 'x', extra: { base_url: chat.url } })
    ).body.data.id;
    const bad = async (config: Approval, field: string) => {
      const res = await owner.client.post(W, {
        title: 'bad approval',
        trigger: { type: 'manual' },
        nodes: [{ id: 'a', type: 'approval', config: { summary: 's', approvers: { users: ['grace'] }, timeout_ms: 1000, ...config } }],
      });
      expect(res.status, res.text).toBe(400);
      expect(res.body.data.errors.map((e: { field: string }) => e.field)).toContain(field);
    };
    await bad({ editable: { type: 'string' } }, 'nodes.0.config.editable');
    await bad({ editable: { type: 'object', properties: { a: { type: 'no-such-type' } } } }, 'nodes.0.config.editable');
    await bad({ approvers: { users: ['nobody-of-that-name'] } }, 'nodes.0.config.approvers.users.0');
    await bad({ required: 2 }, 'nodes.0.config.required');
    await bad({ remind_every_ms: 5000 }, 'nodes.0.config.remind_every_ms');
    await bad({ escalate_after_ms: 5000 }, 'nodes.0.config.escalate_to');
    await bad({ approvers: { capability: 'no_such_capability' } }, 'nodes.0.config.approvers');
    await bad({ notify: { connection_id: foreign, path: '/hook' } }, 'nodes.0.config.notify.connection_id');
  });
});

describe('the expense approval', () => {
  it('over 1,000: the manager is notified in the chat, approves with an edited amount, and the run pays that amount', async () => {
    const id = await expenseWorkflow({ notify: { connection_id: chatConnection, path: '/hooks/expenses' } });
    const run = await start(id);
    const { action_id: actionId } = await actionOf(run);
    // The chat webhook got the manager's link, with the connection's credential.
    const posted = await eventually(
      async () => chat.requests.find((r) => r.url === '/hooks/expenses' && r.body.includes(actionId)),
      60_000,
      'the notification',
    );
    expect(posted.method).toBe('POST');
    expect(posted.headers.authorization).toBe('Bearer chat-webhook-secret-token');
    const notice = JSON.parse(posted.body);
    expect(notice).toMatchObject({ action_id: actionId, execution_id: run, summary: 'Expense of 1800 EUR by ada', notice: 'requested' });
    expect(notice.links.map((l: { login: string }) => l.login)).toEqual(['grace']);
    expect(notice.links[0].url).toMatch(/\/api\/workflow\/v1\/approvals\/[^/]+$/);

    // One inbox: the manager sees it among their actions, with where it comes from.
    const inbox = await manager.client.get(`${A}?source=workflow&status=pending`);
    const item = inbox.body.data.items.find((i: { action_id: string }) => i.action_id === actionId);
    expect(item).toMatchObject({ source: 'workflow', execution_id: run, node_id: 'manager', summary: 'Expense of 1800 EUR by ada', required: 1, approvals: 0 });
    expect(item.approve_url).toBe(notice.links[0].url);
    // The owner, whose run it is, does not find it to decide, but may look at it, without a link.
    expect((await owner.client.get(`${A}?source=workflow`)).body.data.items.some((i: { action_id: string }) => i.action_id === actionId)).toBe(false);
    const seen = await owner.client.get(`${A}/${actionId}`);
    expect(seen.status).toBe(200);
    expect(seen.body.data.approve_url).toBeUndefined();
    expect((await stranger.client.get(`${A}/${actionId}`)).status).toBe(404);

    const decided = await approve(manager, actionId, { note: 'Within budget after all', fields: { amount: 1500 } });
    expect(decided.status, decided.text).toBe(202);
    expect(decided.body.data).toMatchObject({ source: 'workflow', status: 'approved', approvals: 1, fields: { amount: 1500, purpose: 'Conference' } });
    const done = await finished(run);
    expect(done.status).toBe('success');
    expect(nodeOf(done, 'manager').output).toMatchObject({
      decision: 'approved',
      branch: 'approved',
      fields: { amount: 1500, purpose: 'Conference' },
      decided_by: [{ login: 'grace', decision: 'approved', note: 'Within budget after all' }],
    });
    expect(nodeOf(done, 'pay').output).toEqual({ paid: 1500 });
    expect(nodeOf(done, 'refuse').status).toBe('skipped');
    // Deciding again, by anyone: 409.
    expect((await approve(manager, actionId)).status).toBe(409);
    expect((await reject(manager, actionId)).body.error).toBe('action_already_decided');
  });

  it('under 1,000 asks nobody', async () => {
    const id = await expenseWorkflow();
    const done = await finished(await start(id, { amount: 200, by: 'ada', purpose: 'Lunch' }));
    expect(nodeOf(done, 'manager').status).toBe('skipped');
  });

  it('a rejection ends it at once, with its note', async () => {
    const run = await start(await expenseWorkflow({ approvers: { users: ['grace', 'linus'] }, required: 2 }));
    const { action_id: actionId } = await actionOf(run);
    expect((await reject(finance, actionId, { note: 'Not in this quarter' })).body.data.status).toBe('rejected');
    const done = await finished(run);
    expect(nodeOf(done, 'manager').output).toMatchObject({
      decision: 'rejected',
      decided_by: [{ login: 'linus', decision: 'rejected', note: 'Not in this quarter' }],
    });
    expect(nodeOf(done, 'refuse').output).toEqual({ refused: 'rejected' });
  });

  it('expires at its deadline: the expired branch, and a late decision gets 409 action_expired', async () => {
    const run = await start(await expenseWorkflow({ timeout_ms: 400 }));
    const { action_id: actionId } = await actionOf(run);
    const done = await finished(run);
    expect(nodeOf(done, 'manager').output).toMatchObject({ decision: 'expired', decided_by: [] });
    expect(nodeOf(done, 'refuse').output).toEqual({ refused: 'expired' });
    const late = await approve(manager, actionId);
    expect(late.status).toBe(409);
    expect(late.body.error).toBe('action_expired');
  });
});

describe('who may decide', () => {
  it('not the run’s owner while self_approval is false, on the API; self_approval true lets them', async () => {
    const run = await start(await expenseWorkflow({ approvers: { users: ['ada', 'grace'] } }));
    const { action_id: actionId } = await actionOf(run);
    const refused = await approve(owner, actionId);
    expect(refused.status).toBe(403);
    expect(refused.body.data).toEqual({ self_approval: false });
    expect((await approve(stranger, actionId)).status).toBe(404);
    expect((await approve(manager, actionId)).status).toBe(202);

    const own = await start(await expenseWorkflow({ approvers: { users: ['ada'] }, self_approval: true }));
    const ownAction = (await actionOf(own)).action_id;
    expect((await approve(owner, ownAction)).status).toBe(202);
    expect((await finished(own)).status).toBe('success');
  });

  it('not an administrator either, on their own run, though they hold every capability', async () => {
    const id = await expenseWorkflow({ approvers: { capability: 'svc_manage_workflows' } }, app.admin);
    const run = await start(id, { amount: 2000, by: 'admin', purpose: 'Servers' }, app.admin);
    const { action_id: actionId } = await actionOf(run);
    const refused = await app.admin.post(`${A}/${actionId}/approve`, {});
    expect(refused.status).toBe(403);
    // Any other holder of the capability decides it; their inbox shows it.
    expect((await manager.client.get(`${A}?source=workflow`)).body.data.items.some((i: { action_id: string }) => i.action_id === actionId)).toBe(true);
    expect((await approve(manager, actionId)).status).toBe(202);
    expect((await finished(run)).status).toBe('success');
  });

  it('a run nobody but its own people could approve fails its node instead of waiting for nothing', async () => {
    const done = await finished(await start(await expenseWorkflow({ approvers: { users: ['ada'] } })));
    expect(done.status).toBe('failed');
    expect(nodeOf(done, 'manager')).toMatchObject({ status: 'failed', error: { code: 'validation_failed' } });
  });
});

describe('distinct approvers', () => {
  it('required 2: one approval leaves it pending, the same person again gets 409, a second approver approves it', async () => {
    const run = await start(await expenseWorkflow({ approvers: { users: ['grace', 'linus', 'barbara'] }, required: 2 }));
    const { action_id: actionId } = await actionOf(run);
    const first = await approve(manager, actionId, { note: 'ok by me' });
    expect(first.body.data).toMatchObject({ status: 'pending', approvals: 1 });
    const twice = await approve(manager, actionId);
    expect(twice.status).toBe(409);
    expect(twice.body.error).toBe('approver_already_decided');
    expect((await reject(manager, actionId)).body.error).toBe('approver_already_decided');
    expect((await approve(finance, actionId)).body.data).toMatchObject({ status: 'approved', approvals: 2 });
    const done = await finished(run);
    expect(nodeOf(done, 'manager').output.decided_by.map((d: { login: string }) => d.login)).toEqual(['grace', 'linus']);
  });

  it('two approvers at once on a single approval: one decides it, the other gets 409; the run resumes once', async () => {
    const run = await start(await expenseWorkflow({ approvers: { users: ['grace', 'linus'] } }));
    const { action_id: actionId } = await actionOf(run);
    const answers = await Promise.all([approve(manager, actionId), approve(finance, actionId)]);
    expect(answers.map((a) => a.status).sort()).toEqual([202, 409]);
    expect(answers.find((a) => a.status === 409)!.body.error).toBe('action_already_decided');
    const done = await finished(run);
    expect(nodeOf(done, 'manager').output.decided_by).toHaveLength(1);
    expect(nodeOf(done, 'pay').status).toBe('success');
  });

  it('two approvers at once on a double approval: both count, it is approved', async () => {
    const run = await start(await expenseWorkflow({ approvers: { users: ['grace', 'linus'] }, required: 2 }));
    const { action_id: actionId } = await actionOf(run);
    const answers = await Promise.all([approve(manager, actionId), approve(finance, actionId)]);
    expect(answers.map((a) => a.status)).toEqual([202, 202]);
    const done = await finished(run);
    expect(nodeOf(done, 'manager').output).toMatchObject({ decision: 'approved' });
    expect(nodeOf(done, 'manager').output.decided_by).toHaveLength(2);
  });
});

describe('edited fields', () => {
  it('outside the schema: 400 naming the field, and the action stays pending', async () => {
    const run = await start(await expenseWorkflow());
    const { action_id: actionId } = await actionOf(run);
    const tooMuch = await approve(manager, actionId, { fields: { amount: 9000 } });
    expect(tooMuch.status).toBe(400);
    expect(tooMuch.body.data.errors).toEqual([expect.objectContaining({ field: 'fields.amount' })]);
    const notEditable = await approve(manager, actionId, { fields: { purpose: 'Holidays' } });
    expect(notEditable.status).toBe(400);
    expect(notEditable.body.data.errors).toEqual([expect.objectContaining({ field: 'fields.purpose' })]);
    const wrongType = await approve(manager, actionId, { fields: { amount: 'lots' } });
    expect(wrongType.body.data.errors[0].field).toBe('fields.amount');
    expect((await manager.client.get(`${A}/${actionId}`)).body.data).toMatchObject({
      status: 'pending',
      approvals: 0,
      decided_by: [],
      fields: { amount: 1800 },
    });
    // Arguments are the agent's: a workflow approval refuses them, and an agent action refuses fields.
    expect((await approve(manager, actionId, { args: { x: 1 } })).body.data.errors[0].field).toBe('args');
    expect((await approve(manager, actionId, { stream: true })).status).toBe(400);
    expect((await approve(manager, actionId, { fields: { amount: 1000 } })).body.data).toMatchObject({ status: 'approved', fields: { amount: 1000 } });
    expect(nodeOf(await finished(run), 'pay').output).toEqual({ paid: 1000 });
  });

  it('against a pattern that backtracks without end: checked off the API’s thread and refused at the expression time limit, the API answering meanwhile', async () => {
    // A hostile editor's schema: `^(a|a)*$` takes about twice as long for each character more.
    const run = await start(
      await expenseWorkflow({
        fields: { code: 'aaaa' },
        editable: { type: 'object', properties: { code: { type: 'string', pattern: '^(a|a)*$' } } },
      }),
    );
    const { action_id: actionId } = await actionOf(run);
    const checking = approve(manager, actionId, { fields: { code: `${'a'.repeat(40)}!` } });
    // The process still serves other requests while the edit is checked.
    expect((await manager.client.get(`${A}/${actionId}`)).body.data.status).toBe('pending');
    const refused = await checking;
    expect(refused.status, refused.text).toBe(400);
    expect(refused.body.data.errors).toEqual([{ field: 'fields', message: expect.stringMatching(/could not be checked/) }]);
    expect((await manager.client.get(`${A}/${actionId}`)).body.data).toMatchObject({ status: 'pending', approvals: 0, fields: { code: 'aaaa' } });
    // A value the pattern answers at once is checked as usual.
    expect((await approve(manager, actionId, { fields: { code: 'b' } })).body.data.errors).toEqual([expect.objectContaining({ field: 'fields.code' })]);
    expect((await approve(manager, actionId, { fields: { code: 'aa' } })).body.data).toMatchObject({ status: 'approved', fields: { code: 'aa' } });
  });
});

/** A connection of its own holding the action's row lock: a decision or the expiry queues behind it. */
async function holdAction(actionId: string) {
  const client = new pg.Client({ connectionString: app.databaseUrl });
  await client.connect();
  await client.query('begin');
  const [row] = (await client.query<{ status: string }>('select status from agent_actions where action_id = $1 for update', [actionId])).rows;
  return {
    status: row!.status,
    release: async () => {
      await client.query('commit');
      await client.end();
    },
  };
}

const queuedFor = (pattern: string) =>
  eventually(
    async () => {
      const rows = await app.sql(
        `select pid from pg_stat_activity where datname = current_database() and cardinality(pg_blocking_pids(pid)) > 0 and query ilike $1`,
        [pattern],
      );
      return rows.length > 0;
    },
    60_000,
    `a statement like ${pattern} to queue for the action`,
  );

describe('a decision and the expiry at once', () => {
  it('the expiry stored first wins: the decision queued behind it gets 409 action_expired, the run takes the expired branch', async () => {
    for (let timeoutMs = 2000; ; timeoutMs *= 2) {
      const run = await start(await expenseWorkflow({ timeout_ms: timeoutMs }));
      const { action_id: actionId } = await actionOf(run);
      const held = await holdAction(actionId);
      if (held.status !== 'pending') {
        await held.release();
        if (timeoutMs > 30_000) throw new Error('the deadline kept passing before the action could be held');
        continue;
      }
      await queuedFor(`%set status = 'expired'%`);
      const deciding = approve(manager, actionId);
      await queuedFor('%from agent_actions where action_id = % for update%');
      await held.release();
      const answer = await deciding;
      expect(answer.status).toBe(409);
      expect(answer.body.error).toBe('action_expired');
      expect(nodeOf(await finished(run), 'manager').output).toMatchObject({ decision: 'expired' });
      return;
    }
  });

  it('whichever comes first, the answer and the run agree', async () => {
    // Decisions sent around the deadline of several approvals: each is either taken (and the run
    // approved) or refused as expired (and the run expired), never both, never neither.
    const runs = await Promise.all([0, 1, 2, 3].map(async () => start(await expenseWorkflow({ timeout_ms: 1500 }))));
    const actions = await Promise.all(runs.map(async (r) => (await actionOf(r)).action_id));
    const answers = await Promise.all(
      actions.map(async (actionId, i) => {
        await new Promise((r) => setTimeout(r, 1200 + i * 150));
        return approve(manager, actionId);
      }),
    );
    for (const [i, run] of runs.entries()) {
      const output = nodeOf(await finished(run), 'manager').output;
      if (answers[i]!.status === 202) expect(output.decision, `run ${i}`).toBe('approved');
      else {
        expect(answers[i]!.body.error, `run ${i}`).toBe('action_expired');
        expect(output.decision, `run ${i}`).toBe('expired');
      }
    }
  });
});

describe('a cancelled run', () => {
  it('ends its pending approval: cancelled in the inbox, and deciding it gets 409', async () => {
    const run = await start(await expenseWorkflow());
    const { action_id: actionId } = await actionOf(run);
    const cancel = await owner.client.post(`${E}/${run}/cancel`);
    expect(cancel.body.data).toEqual({ execution_id: run, status: 'cancelled' });
    const item = (await manager.client.get(`${A}/${actionId}`)).body.data;
    expect(item.status).toBe('cancelled');
    expect(item.approve_url).toBeUndefined();
    const late = await approve(manager, actionId);
    expect(late.status).toBe(409);
    expect(late.body).toMatchObject({ error: 'action_already_decided', data: { status: 'cancelled' } });
    expect((await manager.client.get(`${A}?source=workflow&status=pending`)).body.data.items.some((i: { action_id: string }) => i.action_id === actionId)).toBe(
      false,
    );

    // A cancel from the Temporal Web UI (a cancel request to the workflow) does the same.
    const fromUi = await start(await expenseWorkflow());
    const uiAction = (await actionOf(fromUi)).action_id;
    const view = (await app.admin.get(`${E}/${fromUi}`)).body.data;
    await app.stack.services.temporal.client.workflow.getHandle(view.temporal.workflow_id).cancel();
    expect((await finished(fromUi)).status).toBe('cancelled');
    expect((await manager.client.get(`${A}/${uiAction}`)).body.data.status).toBe('cancelled');
  });
});

describe('a run that ended without its approval', () => {
  it('terminated in Temporal: a decision finds the run gone and closes the action; else the sweep does', async () => {
    const stop = async (run: number) => {
      const view = (await app.admin.get(`${E}/${run}`)).body.data;
      await app.stack.services.temporal.client.workflow.getHandle(view.temporal.workflow_id).terminate('operator stopped it');
    };
    const decided = await start(await expenseWorkflow());
    const decidedAction = (await actionOf(decided)).action_id;
    await stop(decided);
    const late = await approve(manager, decidedAction);
    expect(late.status).toBe(409);
    expect(late.body).toMatchObject({ error: 'action_already_decided', data: { status: 'cancelled' } });

    const swept = await start(await expenseWorkflow());
    const sweptAction = (await actionOf(swept)).action_id;
    await stop(swept);
    expect((await finished(swept)).status).toBe('failed');
    // The worker's sweep (every 15 s) closes it once the record says the run ended.
    await eventually(
      async () => (await app.sql<{ status: string }>('select status from agent_actions where action_id = $1', [sweptAction]))[0]!.status === 'cancelled',
      60_000,
      'the sweep to close the approval',
    );
  });
});

describe('replaying around an approval', () => {
  it('from the node after it reuses the decision; from the approval itself asks again, with a new action', async () => {
    const run = await start(await expenseWorkflow());
    const first = (await actionOf(run)).action_id;
    await approve(manager, first, { fields: { amount: 1234 } });
    expect(nodeOf(await finished(run), 'pay').output).toEqual({ paid: 1234 });

    const after = await owner.client.post(`${E}/${run}/replay`, { from_node_id: 'pay' });
    expect(after.status, after.text).toBe(202);
    const reused = await finished(after.body.data.execution_id);
    expect(nodeOf(reused, 'manager')).toMatchObject({ reused: true, output: { decision: 'approved' } });
    expect(nodeOf(reused, 'pay').output).toEqual({ paid: 1234 });
    expect((await app.sql('select 1 from agent_actions where execution_id = $1', [after.body.data.execution_id])).length).toBe(0);

    const again = await owner.client.post(`${E}/${run}/replay`, { from_node_id: 'manager' });
    expect(again.status, again.text).toBe(202);
    const asked = (await actionOf(again.body.data.execution_id)).action_id;
    expect(asked).not.toBe(first);
    expect((await manager.client.get(`${A}/${first}`)).body.data.status).toBe('approved');
    await reject(manager, asked, { note: 'changed my mind' });
    expect(nodeOf(await finished(again.body.data.execution_id), 'refuse').output).toEqual({ refused: 'rejected' });
  });
});

describe('reminders and escalation', () => {
  it('remind those who have not decided, and escalate to more approvers, through the chat connection', async () => {
    const path = `/hooks/remind-${Math.random().toString(36).slice(2)}`;
    const run = await start(
      await expenseWorkflow({
        approvers: { users: ['grace', 'linus'] },
        required: 2,
        notify: { connection_id: chatConnection, path },
        remind_every_ms: 1000,
        // Long enough for grace's decision to be stored first on a loaded machine: the escalation
        // names whoever has not decided when it is sent.
        escalate_after_ms: 6000,
        escalate_to: { users: ['barbara'] },
      }),
    );
    const { action_id: actionId } = await actionOf(run);
    const posts = () => chat.requests.filter((r) => r.url === path).map((r) => JSON.parse(r.body) as { notice: string; links: { login: string }[] });
    await eventually(async () => posts().some((p) => p.notice === 'requested'), 60_000, 'the request');
    expect((await approve(manager, actionId)).body.data.status).toBe('pending');
    // A reminder after grace decided names only linus; the escalation adds barbara.
    const reminder = await eventually(
      async () => posts().find((p) => p.notice === 'reminder' && !p.links.some((l) => l.login === 'grace')),
      60_000,
      'a reminder',
    );
    expect(reminder.links.map((l) => l.login)).toEqual(['linus']);
    const escalated = await eventually(async () => posts().find((p) => p.notice === 'escalated'), 60_000, 'the escalation');
    expect(escalated.links.map((l) => l.login).sort()).toEqual(['barbara', 'linus']);
    expect((await manager.client.get(`${A}/${actionId}`)).body.data.approvers.users.map((u: { login: string }) => u.login)).toEqual([
      'grace',
      'linus',
      'barbara',
    ]);
    expect((await approve(boss, actionId)).body.data.status).toBe('approved');
    expect((await finished(run)).status).toBe('success');
  });

  it('a notification the egress policy refuses does not stop the approval', async () => {
    const blocked = (
      await app.admin.post('/api/workflow/v1/connections', {
        type: 'http_bearer',
        label: 'blocked',
        cred: 'x',
        extra: { base_url: 'http://127.0.0.9:9' },
        shared_with: [owner.id],
      })
    ).body.data.id;
    const run = await start(await expenseWorkflow({ notify: { connection_id: blocked, path: '/x' } }));
    const { action_id: actionId } = await actionOf(run);
    await eventually(
      async () => {
        const text = await fetch(`${app.url}/metrics`).then((r) => r.text());
        return /svc_workflow_approval_notifications_total\{notice="requested",outcome="failed"\} [1-9]/.test(text);
      },
      60_000,
      'the refused notification',
    );
    expect((await approve(manager, actionId)).body.data.status).toBe('approved');
    expect((await finished(run)).status).toBe('success');
  });
});

describe('metrics', () => {
  it('gauge the pending approvals and count outcomes and time to decision', async () => {
    const run = await start(await expenseWorkflow());
    const { action_id: actionId } = await actionOf(run);
    const text = await fetch(`${app.url}/metrics`).then((r) => r.text());
    expect(Number(/^svc_workflow_pending_approvals (\d+)/m.exec(text)?.[1])).toBeGreaterThanOrEqual(1);
    await approve(manager, actionId);
    await finished(run);
    const after = await fetch(`${app.url}/metrics`).then((r) => r.text());
    expect(after).toMatch(/svc_workflow_approvals_total\{outcome="approved"\} [1-9]/);
    expect(after).toMatch(/svc_workflow_approval_decision_seconds_count\{outcome="approved"\} [1-9]/);
  });
});
