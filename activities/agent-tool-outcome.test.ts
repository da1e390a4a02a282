import { describe, expect, it } from 'vitest';
import type { CheckedActionRow } from '../src/agent/agent-action.store.js';
import type { ActionRow } from '../src/agent/agent.store.js';
import {
  MAX_TOOL_CONTENT,
  decisionRecord,
  editorOf,
  expectedStatus,
  expiredEnd,
  gateRefusal,
  noRunnerOutcome,
  outcomeUnknownEnd,
  ranEnd,
  rejectedEnd,
  truncateToolContent,
} from './agent-tool-outcome.js';

const call = { id: 'call_1', name: 'update_record', args: { id: 'r1', data: { a: 1 } } };

function action(over: Partial<CheckedActionRow> = {}): CheckedActionRow {
  return {
    action_id: 'act_1',
    session_id: 's1',
    turn_id: 't1',
    tool_call_id: 'call_1',
    tool: 'update_record',
    args: call.args,
    edited_args: null,
    summary: 'update r1',
    status: 'approved',
    note: null,
    decided_by: 7,
    decided_at: '2026-01-01T00:00:00.000Z',
    started_at: null,
    expires_at: null,
    outcome: null,
    same_call: true,
    same_edit: true,
    ...over,
  } as CheckedActionRow;
}

describe('re-authorisation of a gated call against its stored action', () => {
  const approved = { actionId: 'act_1', approved: true, decidedBy: 7 };

  it('lets an approved call matching its stored action run', () => {
    expect(gateRefusal('update_record', approved, action())).toBeUndefined();
  });

  it('refuses an action that is missing or belongs to another call', () => {
    expect(gateRefusal('update_record', approved, undefined)?.message).toBe('Action act_1 is not the action of this update_record call');
    expect(gateRefusal('update_record', approved, action({ same_call: false }))?.message).toMatch(/not the action of this/);
  });

  it('says a decision whose claim rolled back is still pending, so the workflow opens the gate again', () => {
    expect(gateRefusal('update_record', approved, action({ status: 'pending' }))).toEqual({
      message: 'Action act_1 is still pending: its decision was not stored',
      details: { stored: 'pending' },
    });
  });

  it('refuses a decision other than the stored one, and an edit other than the approved one', () => {
    expect(gateRefusal('update_record', approved, action({ status: 'rejected' }))?.message).toBe('Action act_1 is rejected, not approved');
    expect(gateRefusal('update_record', { ...approved, approved: false }, action())?.message).toBe('Action act_1 is approved, not rejected');
    expect(gateRefusal('update_record', approved, action({ same_edit: false }))?.message).toBe('Action act_1 was approved with other arguments');
  });

  it('takes an expiry against a still pending row as not pending-rolled-back', () => {
    const expired = { actionId: 'act_1', approved: false, expired: true };
    expect(expectedStatus(expired)).toBe('expired');
    expect(gateRefusal('update_record', expired, action({ status: 'pending' }))?.message).toBe('Action act_1 is pending, not expired');
    expect(gateRefusal('update_record', expired, action({ status: 'expired' }))).toBeUndefined();
  });
});

describe('what the model reads when a call ends', () => {
  it('tells an expiry and a rejection, with the note, and runs nothing', () => {
    const expired = expiredEnd(new Date('2026-01-01T00:00:00Z'));
    expect(JSON.parse(expired.content)).toEqual({
      error: 'action_expired',
      message: 'Nobody decided on this action before it expired at 2026-01-01T00:00:00.000Z; it was not carried out.',
    });
    expect(expired).toMatchObject({ ok: false, summary: 'expired: nobody approved it in time; it was not carried out' });
    expect(rejectedEnd('too risky')).toMatchObject({
      ok: false,
      summary: 'rejected by the user: too risky',
      streamed: { error: 'rejected_by_user', note: 'too risky' },
    });
    expect(rejectedEnd(null).summary).toBe('rejected by the user');
  });

  it('says an approved call that already started once may or may not have run', () => {
    const end = outcomeUnknownEnd();
    expect(end.ok).toBe(false);
    expect(end.summary).toBe(`error: ${(end.streamed as { message: string }).message}`);
    expect(JSON.parse(end.content).error).toBe('outcome_unknown');
  });

  it('gives the result of a call that ran, and both versions of arguments the approver edited', () => {
    const plain = ranEnd(call, undefined, null, { ok: true, result: { id: 'r1' } });
    expect(plain).toEqual({ content: '{"id":"r1"}', summary: '{"id":"r1"}', streamed: { id: 'r1' }, ok: true });
    const edited = ranEnd(call, { id: 'r2' }, 'use r2', { ok: false, result: { error: 'not_found' } });
    expect(JSON.parse(edited.content)).toEqual({
      edited_by_approver: true,
      message: expect.stringContaining('proposed_args'),
      proposed_args: call.args,
      args: { id: 'r2' },
      note: 'use r2',
      result: { error: 'not_found' },
    });
    expect(edited.summary).toBe('ran with arguments edited by the approver: error: {"error":"not_found"}');
    expect(edited.streamed).toEqual({ error: 'not_found' });
  });

  it('cuts long results so one call cannot flood the context', () => {
    expect(truncateToolContent('x'.repeat(MAX_TOOL_CONTENT))).toBe('x'.repeat(MAX_TOOL_CONTENT));
    expect(truncateToolContent('x'.repeat(MAX_TOOL_CONTENT + 1))).toBe(`${'x'.repeat(MAX_TOOL_CONTENT)}... (truncated)`);
    expect(ranEnd(call, undefined, null, { ok: true, result: undefined }).content).toBe('null');
  });
});

describe('whose rights a call runs with', () => {
  it('runs as the owner unless someone else edited the arguments, then as that approver', () => {
    expect(editorOf(undefined, 1)).toBeUndefined();
    expect(editorOf(action({ decided_by: 7 }), 1)).toBeUndefined();
    expect(editorOf(action({ decided_by: 1, edited_args: { id: 'r2' } }), 1)).toBeUndefined();
    expect(editorOf(action({ decided_by: 7, edited_args: { id: 'r2' } }), 1)).toBe(7);
  });

  it('names who no longer exists when there is nobody to run it', () => {
    expect(noRunnerOutcome(7).result).toEqual({ error: 'forbidden', message: 'The approver no longer exists' });
    expect(noRunnerOutcome(undefined).result).toEqual({ error: 'forbidden', message: 'The session owner no longer exists' });
  });

  it('records the decision with the edit the approver made', () => {
    const row: ActionRow = action({ status: 'approved', note: 'ok', edited_args: { id: 'r2' } });
    expect(decisionRecord({ actionId: 'act_1', approved: true }, row)).toEqual({
      action_id: 'act_1',
      status: 'approved',
      approved: true,
      note: 'ok',
      decided_by: 7,
      edited_args: { id: 'r2' },
    });
    expect(decisionRecord({ actionId: 'act_1', approved: false }, action({ status: 'rejected' }))).not.toHaveProperty('edited_args');
  });
});
