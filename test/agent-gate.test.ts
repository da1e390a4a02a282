import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../activities/index.js';
import { agentTools, toolSpecs } from '../src/agent/agent.tools.js';
import { AGENT_ACTION_NOT_APPROVED, AGENT_GATED_TOOLS, agentSessionWorkflowId } from '../workflows/defs.js';
import { agentDecisionUpdate } from '../workflows/agent.updates.js';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';
import { parseSse, providerConnection, shareConnections, startFakeAnthropic, startFakeOpenAi, type FakeProvider } from './helpers/fake-providers.js';

// The side-effect gate beyond approve/reject: edited arguments, expiry, who may decide, the inbox,
// the audit trail, the budget, and the tool activity's own refusal of unapproved calls.
const A = '/api/agent/v1';
const M = '/api/management/v1';
const EVENTS = ['token', 'tool_call', 'tool_result', 'gate_pending', 'done'];
let app: TestApp;
let openai: FakeProvider;
let anthropic: FakeProvider;
let openaiId: number;
let anthropicId: number;
let owner: TestUser;
let colleague: TestUser;
let agentOnly: TestUser;

beforeAll(async () => {
  // svc_agent_use maps to `read` here, so subscribers use the agent without holding svc_agent_approve.
  app = await startTestApp({
    worker: true,
    env: {
      SVC_AGENT_CAPABILITY: 'read',
      SVC_AGENT_PRICES: JSON.stringify({ 'gpt-test': { in: 1, out: 2 }, 'claude-priced': { in: 3, out: 4 } }),
    },
  });
  [openai, anthropic] = await Promise.all([startFakeOpenAi(), startFakeAnthropic()]);
  openaiId = await providerConnection(app.admin, 'openai', openai.url);
  anthropicId = await providerConnection(app.admin, 'anthropic', anthropic.url);
  owner = await app.createUser('editor');
  colleague = await app.createUser('editor');
  agentOnly = await app.createUser('subscriber');
  await shareConnections(app.admin, [openaiId, anthropicId], [owner, colleague, agentOnly]);
  const entity = await app.admin.post(`${M}/entities`, { slug: 'note', name: 'Note', schema: { fields: { title: { type: 'string', required: true } } } });
  expect(entity.status, entity.text).toBe(201);
});
afterAll(async () => {
  await app?.close();
  await openai?.close();
  await anthropic?.close();
});

async function session(body: Record<string, unknown> = {}, client = owner.client): Promise<string> {
  const res = await client.post(`${A}/sessions`, { provider_id: openaiId, model_id: 'gpt-test', ...body });
  expect(res.status, res.text).toBe(201);
  return res.body.data.session_id as string;
}
const say = (id: string, content: string, client = owner.client) => client.post(`${A}/sessions/${id}/messages`, { content, stream: false });
const titles = async (title: string) => (await app.sql('select 1 from records.e_note where title = $1', [title])).length;

/**
 * A session whose first message stops at a records_create gate; returns the session and action
 * ids. Several gates may wait at once, so the model's answer after a decision is scripted by the
 * test just before the decision that succeeds (unscripted, the fake provider answers "ok").
 */
async function gate(title: string, body: Record<string, unknown> = {}): Promise<{ id: string; actionId: string }> {
  const id = await session(body);
  openai.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title } } }] });
  const res = await say(id, `create ${title}`);
  expect(res.status, res.text).toBe(200);
  expect(res.body.data.outcome, res.text).toBe('gate_pending');
  return { id, actionId: res.body.data.pending_action.action_id };
}

describe('approve with edited arguments', () => {
  it("edited by someone other than the owner, the call is checked and runs with the approver's rights, not the owner's", async () => {
    const vault = await app.admin.post(`${M}/entities`, {
      slug: 'vault',
      name: 'Vault',
      schema: { fields: { title: { type: 'string', required: true } } },
      capabilities: { create: 'svc_manage_entities' },
    });
    expect(vault.status, vault.text).toBe(201);
    const inVault = async (title: string) => (await app.sql('select 1 from records.e_vault where title = $1', [title])).length;
    const adminGate = async (title: string) => {
      const id = await session({ approval: 'others' }, app.admin);
      openai.script({ toolCalls: [{ name: 'records_create', args: { entity: 'vault', fields: { title } } }] });
      const res = await say(id, `create ${title}`, app.admin);
      expect(res.body.data.outcome, res.text).toBe('gate_pending');
      return res.body.data.pending_action.action_id as string;
    };
    // An editor approving the administrator's call as proposed: it runs as the administrator.
    const proposed = await adminGate('proposed');
    openai.script({ text: 'Created.' });
    const asProposed = await colleague.client.post(`${A}/actions/${proposed}/approve`);
    expect(asProposed.body.data, asProposed.text).toMatchObject({
      outcome: 'decided',
      turn: 'answered',
      action: { status: 'approved', outcome: { ok: true } },
    });
    expect(await inVault('proposed')).toBe(1);
    // The same editor writing the arguments: they would run as the editor, who may not create in
    // the vault, so the approval is refused before anything is decided.
    const second = await adminGate('proposed-2');
    const edited = await colleague.client.post(`${A}/actions/${second}/approve`, {
      args: { entity: 'vault', fields: { title: 'written-by-the-approver' } },
    });
    expect(edited.status, edited.text).toBe(403);
    expect(edited.body.data).toMatchObject({ capability: 'svc_manage_entities' });
    expect((await app.admin.get(`${A}/actions/${second}`)).body.data).toMatchObject({ status: 'pending', decided_by: null });
    expect((await colleague.client.post(`${A}/actions/${second}/reject`)).status).toBe(200);
    expect(await inVault('written-by-the-approver')).toBe(0);
  });

  it('validates the arguments against the tool schema, naming the field; nothing is decided', async () => {
    const { actionId } = await gate('to-edit-badly');
    for (const [args, field] of [
      [{ entity: 'note', fields: 'not an object' }, 'args.fields'],
      [{ fields: { title: 'x' } }, 'args.entity'],
      [{ entity: 'note', fields: {}, bogus: 1 }, 'args.bogus'],
    ] as const) {
      const res = await owner.client.post(`${A}/actions/${actionId}/approve`, { args });
      expect(res.status, JSON.stringify(args)).toBe(400);
      expect(res.body.error).toBe('validation_failed');
      expect(res.body.data.errors.map((e: any) => e.field)).toContain(field);
    }
    const rejectWithArgs = await owner.client.post(`${A}/actions/${actionId}/reject`, { args: { entity: 'note', fields: {} } });
    expect(rejectWithArgs.status).toBe(400);
    expect((await owner.client.get(`${A}/actions/${actionId}`)).body.data).toMatchObject({ status: 'pending', edited_args: null, decided_by: null });
    expect((await owner.client.post(`${A}/actions/${actionId}/reject`)).status).toBe(200);
  });

  it('validates the edit as the tool itself would (the entity, its fields, their types); the action stays pending', async () => {
    const { actionId } = await gate('to-edit-as-the-tool-would');
    for (const [args, field] of [
      [{ entity: 'note', fields: { title: 42 } }, 'args.fields.title'],
      [{ entity: 'note', fields: {} }, 'args.fields.title'],
      [{ entity: 'note', fields: { title: 'x', colour: 'red' } }, 'args.fields.colour'],
      [{ entity: 'no_such_entity', fields: { title: 'x' } }, 'args.entity'],
    ] as const) {
      const res = await owner.client.post(`${A}/actions/${actionId}/approve`, { args });
      expect(res.status, `${JSON.stringify(args)}: ${res.text}`).toBe(400);
      expect(res.body.error).toBe('validation_failed');
      expect(res.body.data.errors.map((e: any) => e.field)).toContain(field);
    }
    expect((await owner.client.get(`${A}/actions/${actionId}`)).body.data).toMatchObject({ status: 'pending', edited_args: null, decided_by: null });
    openai.script({ text: 'Created it.' });
    const ok = await owner.client.post(`${A}/actions/${actionId}/approve`, { args: { entity: 'note', fields: { title: 'edited-validly' } } });
    expect(ok.body.data.outcome, ok.text).toBe('answered');
    expect(await titles('edited-validly')).toBe(1);
  });

  it('runs the tool with the edited arguments, tells the model, and keeps both versions', async () => {
    const { id, actionId } = await gate('as-proposed');
    openai.script({ text: 'Created it with the corrected title.' });
    const res = await owner.client.post(`${A}/actions/${actionId}/approve`, {
      note: 'fixed the title',
      args: { entity: 'note', fields: { title: 'as-edited' } },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({ outcome: 'answered', assistant_message: 'Created it with the corrected title.' });
    expect(res.body.data.tools_called[0]).toMatchObject({ name: 'records_create', args: { entity: 'note', fields: { title: 'as-edited' } } });
    expect(res.body.data.tools_called[0].result_summary).toMatch(/^ran with arguments edited by the approver: /);
    expect(await titles('as-edited')).toBe(1);
    expect(await titles('as-proposed')).toBe(0);
    const told = JSON.parse(openai.requests.at(-1)!.body.messages.at(-1).content);
    expect(told).toMatchObject({
      edited_by_approver: true,
      proposed_args: { entity: 'note', fields: { title: 'as-proposed' } },
      args: { entity: 'note', fields: { title: 'as-edited' } },
      note: 'fixed the title',
      result: { title: 'as-edited' },
    });
    const action = (await owner.client.get(`${A}/actions/${actionId}`)).body.data;
    expect(action).toMatchObject({
      status: 'approved',
      args: { entity: 'note', fields: { title: 'as-proposed' } },
      edited_args: { entity: 'note', fields: { title: 'as-edited' } },
      note: 'fixed the title',
      decided_by: { login: owner.login },
      outcome: { ok: true },
    });
    const decision = (await owner.client.get(`${A}/sessions/${id}`)).body.data.messages.find((m: any) => m.role === 'decision');
    expect(decision.decision).toMatchObject({ status: 'approved', approved: true, edited_args: { fields: { title: 'as-edited' } } });
  });

  it("treats arguments equal to the model's as no edit", async () => {
    const { actionId } = await gate('unchanged');
    const res = await owner.client.post(`${A}/actions/${actionId}/approve`, { args: { fields: { title: 'unchanged' }, entity: 'note' } });
    expect(res.status, res.text).toBe(200);
    expect((await owner.client.get(`${A}/actions/${actionId}`)).body.data.edited_args).toBeNull();
    expect(openai.requests.at(-1)!.body.messages.at(-1).content).not.toContain('edited_by_approver');
  });

  it('streams an edited approval in the five event kinds', async () => {
    const { actionId } = await gate('stream-proposed');
    const res = await owner.client.post(`${A}/actions/${actionId}/approve`, { stream: true, args: { entity: 'note', fields: { title: 'stream-edited' } } });
    const events = parseSse(res.text);
    for (const e of events) expect(EVENTS).toContain(e.event);
    expect(events.find((e) => e.event === 'tool_result')!.data).toMatchObject({ tool: 'records_create', result: { title: 'stream-edited' } });
    expect(events.at(-1)).toMatchObject({ event: 'done', data: { outcome: 'answered' } });
  });
});

describe('expiry', () => {
  it('expires an undecided action by the session deadline; the model reads the expiry and the turn goes on', async () => {
    const { id, actionId } = await gate('never-decided', { gate_ttl_s: 4 });
    openai.script({ text: 'Nobody approved it, so I did not create the note.' });
    const pending = (await owner.client.get(`${A}/sessions/${id}`)).body.data;
    expect(pending.gate_ttl_s).toBe(4);
    expect(Date.parse(pending.pending_action.expires_at) - Date.now()).toBeLessThanOrEqual(4000);
    const action = await eventually(
      async () => {
        const a = (await owner.client.get(`${A}/actions/${actionId}`)).body.data;
        return a.status === 'expired' && a.outcome ? a : undefined;
      },
      30_000,
      'the expiry',
    );
    expect(action).toMatchObject({ decided_by: null, outcome: { ok: false, result_summary: expect.stringContaining('expired') } });
    expect(await titles('never-decided')).toBe(0);
    const view = await eventually(
      async () => {
        const v = (await owner.client.get(`${A}/sessions/${id}`)).body.data;
        return v.messages.at(-1)?.role === 'assistant' && v.messages.at(-1).content ? v : undefined;
      },
      30_000,
      'the turn to go on',
    );
    expect(view.pending_action).toBeNull();
    expect(view.messages.map((m: any) => m.role)).toEqual(['user', 'assistant', 'decision', 'tool', 'assistant']);
    expect(view.messages[2]).toMatchObject({ content: 'expired', decision: { status: 'expired', approved: false, decided_by: null } });
    expect(view.messages[4].content).toBe('Nobody approved it, so I did not create the note.');
    expect(JSON.parse(openai.requests.at(-1)!.body.messages.at(-1).content)).toMatchObject({ error: 'action_expired' });
    for (const verb of ['approve', 'reject']) {
      const late = await owner.client.post(`${A}/actions/${actionId}/${verb}`);
      expect(late.status).toBe(409);
      expect(late.body.error).toBe('action_expired');
    }
    // The next turn's `done` names the action that expired since the previous message.
    openai.script({ text: 'Hello again.' });
    // The resumed turn has stored its answer; its workflow may take a moment more to end it.
    const next = await eventually(
      async () => {
        const res = await owner.client.post(`${A}/sessions/${id}/messages`, { content: 'still there?', stream: true });
        if (res.status === 409 && res.body.error === 'turn_in_progress') return undefined;
        expect(res.status, res.text).toBe(200);
        return parseSse(res.text);
      },
      30_000,
      'the resumed turn to end',
    );
    expect(next.at(-1)).toMatchObject({ event: 'done', data: { outcome: 'answered', expired_actions: [{ action_id: actionId, tool: 'records_create' }] } });
    openai.script({ text: 'Yes.' });
    const after = parseSse((await owner.client.post(`${A}/sessions/${id}/messages`, { content: 'and now?', stream: true })).text);
    expect(after.at(-1)!.data.expired_actions).toEqual([]);
  });

  it('gives a session without gate_ttl_s the configured deadline (24 h by default)', async () => {
    const { id, actionId } = await gate('default-deadline');
    const view = (await owner.client.get(`${A}/sessions/${id}`)).body.data;
    expect(view.gate_ttl_s).toBe(86_400);
    const left = Date.parse(view.pending_action.expires_at) - Date.now();
    expect(left).toBeGreaterThan(86_300_000);
    expect(left).toBeLessThanOrEqual(86_400_000);
    expect((await owner.client.post(`${A}/actions/${actionId}/reject`)).status).toBe(200);
  });

  it('refuses an invalid gate_ttl_s', async () => {
    for (const gate_ttl_s of [0, -5, 1.5, 'soon', 400 * 86_400]) {
      const res = await owner.client.post(`${A}/sessions`, { provider_id: openaiId, model_id: 'gpt-test', gate_ttl_s });
      expect(res.status, String(gate_ttl_s)).toBe(400);
    }
  });
});

describe('a gate whose session workflow is gone', () => {
  it('approve answers 409 action_already_decided and closes the action as rejected; a new message carries on', async () => {
    const { id, actionId } = await gate('orphaned');
    await app.stack.services.temporal.client.workflow.getHandle(agentSessionWorkflowId(id)).terminate('operator ended it');
    const res = await owner.client.post(`${A}/actions/${actionId}/approve`);
    expect(res.status, res.text).toBe(409);
    expect(res.body).toMatchObject({ error: 'action_already_decided', data: { status: 'rejected' } });
    expect(await titles('orphaned')).toBe(0);
    expect((await owner.client.get(`${A}/actions/${actionId}`)).body.data.status).toBe('rejected');
    openai.script({ text: 'Back again.' });
    const next = await say(id, 'still there?');
    expect(next.body.data, next.text).toMatchObject({ outcome: 'answered', assistant_message: 'Back again.' });
  });
});

describe('a decision that reached the workflow without being stored', () => {
  it('reopens the gate: the action stays pending, and the stored approval that follows runs the tool once', async () => {
    const { id, actionId } = await gate('lost-decision');
    // As if the API's call failed after Temporal had admitted the update, and its claim rolled back.
    const handle = app.stack.services.temporal.client.workflow.getHandle(agentSessionWorkflowId(id));
    const lost = await handle.executeUpdate(agentDecisionUpdate, { args: [{ actionId, approved: true, decidedBy: 1 }], updateId: `lost-${actionId}` });
    expect(lost).toMatchObject({ outcome: 'gate_pending', pending_action: { action_id: actionId } });
    expect(await titles('lost-decision')).toBe(0);
    expect((await owner.client.get(`${A}/actions/${actionId}`)).body.data.status).toBe('pending');
    openai.script({ text: 'Done.' });
    const res = await owner.client.post(`${A}/actions/${actionId}/approve`);
    expect(res.body.data, res.text).toMatchObject({ outcome: 'answered', assistant_message: 'Done.' });
    expect(await titles('lost-decision')).toBe(1);
  });
});

describe('tool calls that share an id', () => {
  it('runs an approved action although the model gave its call the id of another call of the same answer', async () => {
    const id = await session();
    openai.script(
      {
        toolCalls: [
          { id: 'dup', name: 'records_search', args: { entity: 'note' } },
          { id: 'dup', name: 'records_create', args: { entity: 'note', fields: { title: 'same-id' } } },
        ],
      },
      { text: 'Searched, then created.' },
    );
    const res = await say(id, 'search then create');
    expect(res.body.data.outcome, res.text).toBe('gate_pending');
    const actionId = res.body.data.pending_action.action_id;
    const approved = await owner.client.post(`${A}/actions/${actionId}/approve`);
    expect(approved.body.data, approved.text).toMatchObject({ outcome: 'answered', assistant_message: 'Searched, then created.' });
    expect(await titles('same-id')).toBe(1);
    expect((await owner.client.get(`${A}/actions/${actionId}`)).body.data).toMatchObject({ status: 'approved', outcome: { ok: true } });
    // Each result went back to the model under its own call's id.
    const sent = openai.requests.at(-1)!.body.messages;
    const calls = sent.findLast((m: any) => m.role === 'assistant' && m.tool_calls).tool_calls.map((c: any) => c.id);
    expect(new Set(calls).size).toBe(2);
    expect(sent.filter((m: any) => m.role === 'tool').map((m: any) => m.tool_call_id)).toEqual(expect.arrayContaining(calls));
  });
});

describe('who may decide', () => {
  it('owner (the default): only the owner; an administrator sees it but may not decide, others do not see it', async () => {
    const { actionId } = await gate('owner-policy');
    expect((await colleague.client.post(`${A}/actions/${actionId}/approve`)).status).toBe(404);
    expect((await colleague.client.get(`${A}/actions/${actionId}`)).status).toBe(404);
    const admin = await app.admin.post(`${A}/actions/${actionId}/approve`);
    expect(admin.status).toBe(403);
    expect(admin.body).toMatchObject({ error: 'forbidden', data: { approval: 'owner' } });
    expect((await app.admin.get(`${A}/actions/${actionId}`)).status).toBe(200);
    expect((await owner.client.post(`${A}/actions/${actionId}/approve`)).status).toBe(200);
    expect(await titles('owner-policy')).toBe(1);
  });

  it('others (four eyes): the owner is refused with 403; a colleague holding svc_agent_approve decides', async () => {
    const { actionId } = await gate('four-eyes', { approval: 'others' });
    const self = await owner.client.post(`${A}/actions/${actionId}/approve`);
    expect(self.status).toBe(403);
    expect(self.body).toMatchObject({ error: 'forbidden', data: { approval: 'others' } });
    expect(self.body.message).toContain('four eyes');
    // Uses the agent, but lacks svc_agent_approve: another user's session does not exist for them.
    expect((await agentOnly.client.post(`${A}/actions/${actionId}/approve`)).status).toBe(404);
    expect(await titles('four-eyes')).toBe(0);
    const res = await colleague.client.post(`${A}/actions/${actionId}/approve`, { note: 'checked' });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data).toMatchObject({ outcome: 'decided', turn: 'answered', action: { action_id: actionId, status: 'approved', note: 'checked' } });
    expect(await titles('four-eyes')).toBe(1);
    expect((await owner.client.get(`${A}/actions/${actionId}`)).body.data).toMatchObject({
      status: 'approved',
      decided_by: { login: colleague.login },
      note: 'checked',
    });
  });

  it("others: the approver is answered the decision and the tool's outcome, not what the turn then did with the owner's rights", async () => {
    // Only administrators see the vault; the administrator's session asks a colleague to approve.
    const vault = await app.admin.post(`${M}/entities`, {
      slug: 'safe',
      name: 'Safe',
      schema: { fields: { title: { type: 'string', required: true } } },
      capabilities: { view: 'svc_manage_entities', create: 'svc_manage_entities' },
    });
    expect(vault.status, vault.text).toBe(201);
    expect((await app.admin.post(`${M}/records/safe`, { title: 'the-admin-only-secret' })).status).toBe(201);
    expect((await colleague.client.get(`${M}/records/safe`)).status).toBe(403);
    for (const stream of [false, true]) {
      const id = await session({ approval: 'others' }, app.admin);
      const title = `approved-by-colleague-${stream}`;
      openai.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title } } }] });
      const gated = await say(id, 'create a note', app.admin);
      const actionId = gated.body.data.pending_action.action_id as string;
      // After the approved tool the model reads the vault, with the administrator's rights, and talks about it.
      openai.script({ toolCalls: [{ name: 'records_search', args: { entity: 'safe' } }] }, { text: 'The safe holds the-admin-only-secret.' });
      const res = await colleague.client.post(`${A}/actions/${actionId}/approve`, { note: 'fine', stream });
      expect(res.status, res.text).toBe(200);
      const data = stream ? parseSse(res.text).at(-1)!.data : res.body.data;
      if (stream) expect(parseSse(res.text).map((e) => e.event)).toEqual(['done']);
      expect(data).toMatchObject({
        outcome: 'decided',
        turn: 'answered',
        action: {
          action_id: actionId,
          tool: 'records_create',
          status: 'approved',
          decided_by: { login: colleague.login },
          note: 'fine',
          outcome: { ok: true },
        },
      });
      expect(data.action.outcome.result_summary).toContain(title);
      expect(res.text).not.toContain('the-admin-only-secret');
      expect(res.text).not.toContain('records_search');
      expect(await titles(title)).toBe(1);
      // The owner sees the whole turn in the session.
      const history = (await app.admin.get(`${A}/sessions/${id}`)).body.data.messages;
      expect(history.find((m: any) => m.role === 'tool' && m.tool === 'records_search').result_summary).toContain('the-admin-only-secret');
      expect(history.at(-1)).toMatchObject({ role: 'assistant', content: 'The safe holds the-admin-only-secret.' });
    }
  });

  it('others: a turn that stops at another gate after the decision is answered with that action, which the approver decides too', async () => {
    const id = await session({ approval: 'others' });
    openai.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'gate-one' } } }] });
    const first = (await say(id, 'two steps')).body.data.pending_action.action_id;
    openai.script({ toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'gate-two' } } }] });
    const res = await colleague.client.post(`${A}/actions/${first}/approve`);
    expect(res.body.data, res.text).toMatchObject({
      outcome: 'decided',
      turn: 'gate_pending',
      pending_action: { tool: 'records_create', args: { fields: { title: 'gate-two' } } },
    });
    openai.script({ text: 'Both done.' });
    const second = await colleague.client.post(`${A}/actions/${res.body.data.pending_action.action_id}/reject`, { stream: true });
    expect(parseSse(second.text).at(-1)!.data).toMatchObject({ outcome: 'decided', turn: 'answered', action: { status: 'rejected' } });
    expect(second.text).not.toContain('Both done.');
  });

  it('any: the owner or a holder of svc_agent_approve, not a user without it', async () => {
    const first = await gate('any-owner', { approval: 'any' });
    expect((await owner.client.post(`${A}/actions/${first.actionId}/reject`)).status).toBe(200);
    const second = await gate('any-colleague', { approval: 'any' });
    expect((await agentOnly.client.post(`${A}/actions/${second.actionId}/approve`)).status).toBe(404);
    expect((await colleague.client.post(`${A}/actions/${second.actionId}/approve`)).status).toBe(200);
    expect(await titles('any-colleague')).toBe(1);
  });

  it('refuses an unknown policy', async () => {
    const res = await owner.client.post(`${A}/sessions`, { provider_id: openaiId, model_id: 'gpt-test', approval: 'nobody' });
    expect(res.status).toBe(400);
  });
});

describe('inbox and audit', () => {
  it('lists what the caller may decide or has decided, by status, paginated', async () => {
    const mine = await gate('inbox-mine');
    const foursome = await gate('inbox-four-eyes', { approval: 'others' });
    const privateOne = await gate('inbox-private');
    const pending = async (client = colleague.client, query = 'status=pending&per_page=100') => {
      const res = await client.get(`${A}/actions?${query}`);
      expect(res.status, res.text).toBe(200);
      return res.body.data;
    };
    const colleagueIds = (await pending()).items.map((a: any) => a.action_id);
    expect(colleagueIds).toContain(foursome.actionId);
    expect(colleagueIds).not.toContain(mine.actionId);
    expect(colleagueIds).not.toContain(privateOne.actionId);
    const ownerIds = (await pending(owner.client)).items.map((a: any) => a.action_id);
    expect(ownerIds).toEqual(expect.arrayContaining([mine.actionId, privateOne.actionId]));
    expect(ownerIds).not.toContain(foursome.actionId);
    expect((await pending(agentOnly.client)).items).toEqual([]);
    const item = (await pending()).items.find((a: any) => a.action_id === foursome.actionId);
    expect(item).toMatchObject({
      session_id: foursome.id,
      tool: 'records_create',
      args: { entity: 'note', fields: { title: 'inbox-four-eyes' } },
      summary: expect.stringContaining('note'),
      requested_by: { login: owner.login },
      status: 'pending',
      approval: 'others',
      expires_at: expect.any(String),
    });
    expect(item.age_seconds).toBeGreaterThanOrEqual(0);
    const page = await pending(owner.client, 'status=pending&per_page=1&page=2');
    expect(page).toMatchObject({ page: 2, per_page: 1 });
    expect(page.items).toHaveLength(1);
    expect(page.total).toBeGreaterThanOrEqual(2);

    expect((await colleague.client.post(`${A}/actions/${foursome.actionId}/reject`, { note: 'not now' })).status).toBe(200);
    expect((await pending()).items.map((a: any) => a.action_id)).not.toContain(foursome.actionId);
    const decided = await pending(colleague.client, 'status=rejected');
    expect(decided.items.find((a: any) => a.action_id === foursome.actionId)).toMatchObject({ decided_by: { login: colleague.login }, note: 'not now' });
    for (const query of ['status=maybe', 'per_page=101', 'page=0', 'sort=age'])
      expect((await colleague.client.get(`${A}/actions?${query}`)).status, query).toBe(400);
    for (const a of [mine, privateOne]) await owner.client.post(`${A}/actions/${a.actionId}/reject`);
  });

  it('keeps the session audit trail, visible to whoever may decide, and never rewritten', async () => {
    const id = await session({ approval: 'any' });
    openai.script(
      {
        toolCalls: [
          { name: 'records_create', args: { entity: 'note', fields: { title: 'audit-1' } } },
          { name: 'records_create', args: { entity: 'note', fields: { title: 'audit-2' } } },
        ],
      },
      { text: 'One made.' },
    );
    const first = (await say(id, 'two notes')).body.data.pending_action.action_id;
    const second = (await colleague.client.post(`${A}/actions/${first}/approve`, { args: { entity: 'note', fields: { title: 'audit-1b' } } })).body.data
      .pending_action.action_id;
    expect((await owner.client.post(`${A}/actions/${second}/reject`, { note: 'one is enough' })).status).toBe(200);
    const audit = await owner.client.get(`${A}/sessions/${id}/actions`);
    expect(audit.status, audit.text).toBe(200);
    expect(audit.body.data).toMatchObject({ total: 2, page: 1, per_page: 20 });
    expect(audit.body.data.items.map((a: any) => [a.action_id, a.status])).toEqual([
      [first, 'approved'],
      [second, 'rejected'],
    ]);
    expect(audit.body.data.items[0]).toMatchObject({
      decided_by: { login: colleague.login },
      args: { fields: { title: 'audit-1' } },
      edited_args: { fields: { title: 'audit-1b' } },
      outcome: { ok: true },
    });
    expect(audit.body.data.items[1]).toMatchObject({
      decided_by: { login: owner.login },
      note: 'one is enough',
      outcome: { ok: false, result_summary: 'rejected by the user: one is enough' },
    });
    expect(audit.body.data.items[1].decided_at).toEqual(expect.any(String));
    expect((await colleague.client.get(`${A}/sessions/${id}/actions`)).status).toBe(200);
    expect((await agentOnly.client.get(`${A}/sessions/${id}/actions`)).status).toBe(404);
    expect((await app.admin.get(`${A}/sessions/${id}/actions?per_page=1&page=2`)).body.data.items.map((a: any) => a.action_id)).toEqual([second]);
    // Append-only in the database itself: a decision, the request and the outcome cannot change.
    for (const statement of [
      "update agent_actions set status = 'approved' where action_id = $1",
      "update agent_actions set note = 'rewritten' where action_id = $1",
      "update agent_actions set args = '{}' where action_id = $1",
      'update agent_actions set outcome = \'{"ok": true}\' where action_id = $1',
    ]) {
      await expect(app.sql(statement, [second]), statement).rejects.toThrow(/append-only|cannot change|written once/);
    }
    // Nor deleted: not the row, not with its session, not by removing the user who decided it.
    await expect(app.sql('delete from agent_actions where action_id = $1', [second])).rejects.toThrow(/cannot be deleted/);
    await expect(app.sql('delete from agent_sessions where id = $1', [id])).rejects.toThrow(/cannot be deleted/);
    await expect(app.sql('delete from users where id = (select decided_by from agent_actions where action_id = $1)', [second])).rejects.toThrow(
      /violates foreign key constraint|cannot be deleted/,
    );
    expect((await owner.client.get(`${A}/actions/${second}`)).body.data).toMatchObject({ status: 'rejected', note: 'one is enough' });
  });

  it('answers 404 for an action or session audit the caller may not see, or that does not exist', async () => {
    const { id, actionId } = await gate('hidden');
    for (const path of [`${A}/actions/${actionId}`, `${A}/sessions/${id}/actions`]) expect((await colleague.client.get(path)).status, path).toBe(404);
    for (const path of [`${A}/actions/not-a-uuid`, `${A}/actions/00000000-0000-4000-8000-000000000000`, `${A}/sessions/nope/actions`])
      expect((await owner.client.get(path)).status, path).toBe(404);
    await owner.client.post(`${A}/actions/${actionId}/reject`);
  });
});

describe('budget', () => {
  it('refuses every turn with a budget of 0', async () => {
    const id = await session({ budget_usd: 0 });
    const before = openai.requests.length;
    const res = await say(id, 'hello');
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ error: 'budget_exceeded', data: { budget_usd: 0, cost_usd: 0 } });
    const streamed = await owner.client.post(`${A}/sessions/${id}/messages`, { content: 'hello', stream: true });
    expect(streamed.status).toBe(409);
    expect(openai.requests.length).toBe(before);
  });

  it('refuses a turn once the cost so far reached the budget, without cutting a turn in flight', async () => {
    const id = await session({ budget_usd: 1.5 });
    // 1000 tokens in at 1 USD/1k and 500 out at 2 USD/1k: 2 USD for the first model call.
    openai.script(
      { toolCalls: [{ name: 'records_create', args: { entity: 'note', fields: { title: 'over-budget' } } }], usage: { in: 1000, out: 500 } },
      { text: 'Created.', usage: { in: 100, out: 50 } },
    );
    const first = await say(id, 'create it');
    expect(first.body.data.outcome).toBe('gate_pending');
    const approved = await owner.client.post(`${A}/actions/${first.body.data.pending_action.action_id}/approve`);
    expect(approved.status, approved.text).toBe(200);
    expect(approved.body.data.outcome).toBe('answered');
    expect(await titles('over-budget')).toBe(1);
    const view = (await owner.client.get(`${A}/sessions/${id}`)).body.data;
    expect(view).toMatchObject({ budget_usd: 1.5, budget_exceeded: true, totals: { tokens_in: 1100, tokens_out: 550, cost_usd: 2.2 } });
    const refused = await say(id, 'one more');
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ error: 'budget_exceeded', data: { budget_usd: 1.5, cost_usd: 2.2 } });
  });

  it('lets turns run while under the budget, and shows tokens and cost so far', async () => {
    const id = await session({ budget_usd: 10 });
    openai.script({ text: 'cheap', usage: { in: 1000, out: 1000 } });
    expect((await say(id, 'hi')).status).toBe(200);
    const view = (await owner.client.get(`${A}/sessions/${id}`)).body.data;
    expect(view).toMatchObject({ budget_usd: 10, budget_exceeded: false, totals: { tokens_in: 1000, tokens_out: 1000, cost_usd: 3 } });
    for (const budget_usd of [-1, 'ten'])
      expect((await owner.client.post(`${A}/sessions`, { provider_id: openaiId, model_id: 'm', budget_usd })).status).toBe(400);
  });

  it('counts a turn that hit the model-call limit once (its closing message repeats the turn total)', async () => {
    const id = await session({}, owner.client);
    const loop = { toolCalls: [{ name: 'entities_list', args: {} }], usage: { in: 1000, out: 0 } };
    openai.script(...Array(10).fill(loop));
    const res = await say(id, 'loop');
    expect(res.body.data.assistant_message).toContain('limit of 10 model calls');
    expect((await owner.client.get(`${A}/sessions/${id}`)).body.data.totals).toMatchObject({ tokens_in: 10_000, cost_usd: 10 });
  });

  it('shows the tokens and cost of the llm_prompt nodes of an execution', async () => {
    const created = await app.admin.post('/api/workflow/v1/workflows', {
      title: `llm cost ${Math.random()}`,
      trigger: { type: 'manual' },
      nodes: [
        { id: 'one', type: 'llm_prompt', connection_id: anthropicId, config: { model: 'claude-priced', prompt: 'a' } },
        { id: 'two', type: 'llm_prompt', connection_id: anthropicId, config: { model: 'claude-priced', prompt: 'b' } },
      ],
      edges: [{ from: 'one', to: 'two' }],
    });
    expect(created.status, created.text).toBe(201);
    anthropic.script({ text: 'first', usage: { in: 1000, out: 1000 } }, { text: 'second', usage: { in: 2000, out: 500 } });
    const run = await app.admin.post(`/api/workflow/v1/workflows/${created.body.data.id}/run?wait=true&timeout_ms=30000`, { payload: {} });
    expect(run.status, run.text).toBe(200);
    const execution = (await app.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`)).body.data;
    // 3 USD/1k in, 4 USD/1k out: 7 + 8 USD.
    expect(execution.llm_usage).toEqual({ calls: 2, tokens_in: 3000, tokens_out: 1500, cost_usd: 15, price_known: true });
    expect(execution.timeline[0].output.usage).toEqual({ tokens_in: 1000, tokens_out: 1000, cost_usd: 7, price_known: true });
    const plain = await app.admin.post('/api/workflow/v1/workflows', {
      title: `no llm ${Math.random()}`,
      trigger: { type: 'manual' },
      nodes: [{ id: 't', type: 'transform', config: { value: 1 } }],
      edges: [],
    });
    const plainRun = await app.admin.post(`/api/workflow/v1/workflows/${plain.body.data.id}/run?wait=true&timeout_ms=30000`, { payload: {} });
    expect((await app.admin.get(`/api/workflow/v1/executions/${plainRun.body.data.execution_id}`)).body.data.llm_usage).toBeNull();
  });
});

describe('one declaration of the gated tools, enforced by the tool activity', () => {
  it("derives the registry's gated flags from AGENT_GATED_TOOLS", () => {
    const gated = [...agentTools.values()].filter((t) => t.gated).map((t) => t.name);
    expect(gated.sort()).toEqual([...AGENT_GATED_TOOLS].sort());
    for (const spec of toolSpecs()) expect(spec.description.includes('approval'), spec.name).toBe((AGENT_GATED_TOOLS as readonly string[]).includes(spec.name));
  });

  it('refuses to run a gated tool without an action approved for exactly that call', async () => {
    const activities = createActivities(app.stack.services);
    const { id, actionId } = await gate('direct-call');
    const [row] = await app.sql<{ turn_id: string; tool_call_id: string }>('select turn_id, tool_call_id from agent_actions where action_id = $1', [actionId]);
    const call = { id: row!.tool_call_id, name: 'records_create', args: { entity: 'note', fields: { title: 'direct-call' } } };
    const base = { sessionId: id, turnId: row!.turn_id, stepKey: `tool:direct:${Math.random()}` };
    const refused = async (input: Parameters<typeof activities.agentRunTool>[0], why: RegExp) => {
      const err = await activities.agentRunTool({ ...input, stepKey: `tool:direct:${Math.random()}` }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, why.source).toBeInstanceOf(ApplicationFailure);
      expect((err as ApplicationFailure).type).toBe(AGENT_ACTION_NOT_APPROVED);
      expect((err as ApplicationFailure).nonRetryable).toBe(true);
      expect((err as Error).message).toMatch(why);
    };
    await refused({ ...base, call }, /runs only with an approved action/);
    await refused({ ...base, call, decision: { actionId, approved: true, decidedBy: 1 } }, /is still pending: its decision was not stored/);
    await refused(
      { ...base, call: { ...call, args: { entity: 'note', fields: { title: 'something else' } } }, decision: { actionId, approved: true, decidedBy: 1 } },
      /not the action of this/,
    );
    await refused({ ...base, call: { ...call, id: 'call_other' }, decision: { actionId, approved: true, decidedBy: 1 } }, /not the action of this/);
    await refused({ ...base, call: { ...call, name: 'records_delete' }, decision: { actionId, approved: true, decidedBy: 1 } }, /not the action of this/);
    // Once approved (as the API stores it), only with the approver's arguments.
    await app.sql(`update agent_actions set status = 'approved', decided_by = 1, decided_at = now() where action_id = $1`, [actionId]);
    await refused(
      { ...base, call, decision: { actionId, approved: true, decidedBy: 1, editedArgs: { entity: 'note', fields: { title: 'smuggled' } } } },
      /approved with other arguments/,
    );
    await refused({ ...base, call, decision: { actionId, approved: false, decidedBy: 1 } }, /is approved, not rejected/);
    await refused({ ...base, call, decision: { actionId, approved: false, expired: true } }, /is approved, not expired/);
    expect(await titles('direct-call')).toBe(0);
    expect(await titles('smuggled')).toBe(0);
    const ran = await activities.agentRunTool({ ...base, call, decision: { actionId, approved: true, decidedBy: 1 } });
    expect(ran.summary).toContain('direct-call');
    expect(await titles('direct-call')).toBe(1);
  });
});
