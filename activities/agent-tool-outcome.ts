// The pure steps of the agent's tool activity (agentRunTool in agent.activities.ts): checking a
// decision against the stored action, and what the model reads, the history keeps and the stream
// shows for each way a call ends. No I/O, so they are unit tested on their own.
import type { CheckedActionRow } from '../src/agent/agent-action.store.js';
import type { ActionRow, DecisionRecord } from '../src/agent/agent.store.js';
import { summarizeResult, type ToolOutcome } from '../src/agent/agent.tools.js';
import { toIso } from '../src/db/sql.js';
import type { AgentActionStatus, AgentDecision, AgentToolCall } from '../workflows/defs.js';
import { CODE } from '../workflows/error-codes.js';

/** What the model reads as a tool's result; big results are cut so one call cannot flood the context. */
export const MAX_TOOL_CONTENT = 16 * 1024;

/** How a tool call ended: the model's content, the history's summary, the stream's result. */
export interface ToolCallEnd {
  content: string;
  summary: string;
  streamed: unknown;
  /** The tool ran and succeeded (recorded as the action's outcome). */
  ok: boolean;
}

/** Why a call may not run: the failure's message, and `stored: 'pending'` when the claim rolled back. */
export interface Refusal {
  message: string;
  details?: { stored: 'pending' };
}

/** The action status a decision claims: expired, approved or rejected. */
export function expectedStatus(decision: AgentDecision): AgentActionStatus {
  return decision.expired ? 'expired' : decision.approved ? 'approved' : 'rejected';
}

/**
 * Re-authorisation of a gated call: the stored action must be this call's (session, turn, tool
 * call, tool, the model's arguments), hold the decision the workflow was given, and the
 * approver's edit. Answers why not, or undefined when the call may go on.
 */
export function gateRefusal(callName: string, decision: AgentDecision, row: CheckedActionRow | undefined): Refusal | undefined {
  const expected = expectedStatus(decision);
  if (!row || !row.same_call) return { message: `Action ${decision.actionId} is not the action of this ${callName} call` };
  // Still pending: the decision reached the workflow, but the API that sent it rolled its claim
  // back (its call failed after Temporal had admitted the update). The workflow opens the gate
  // again rather than end the turn.
  if (row.status === 'pending' && !decision.expired)
    return { message: `Action ${decision.actionId} is still pending: its decision was not stored`, details: { stored: 'pending' } };
  if (row.status !== expected) return { message: `Action ${decision.actionId} is ${row.status}, not ${expected}` };
  if (!row.same_edit) return { message: `Action ${decision.actionId} was approved with other arguments` };
  return undefined;
}

/** The decision as the history records it, beside the call it decided. */
export function decisionRecord(decision: AgentDecision, action: ActionRow): DecisionRecord {
  return {
    action_id: decision.actionId,
    status: action.status as Exclude<AgentActionStatus, 'pending'>,
    approved: action.status === 'approved',
    note: action.note,
    decided_by: action.decided_by,
    ...(action.edited_args ? { edited_args: action.edited_args } : {}),
  };
}

/** A result the model reads that is not the tool's (it did not run, or may not have). */
function notRun(result: { error: string; message: string }, summary: string): ToolCallEnd {
  return { content: JSON.stringify(result), summary, streamed: result, ok: false };
}

/** Nobody decided before the deadline: nothing ran. */
export function expiredEnd(decidedAt: Date | string | null): ToolCallEnd {
  const message = `Nobody decided on this action before it expired at ${toIso(decidedAt)}; it was not carried out.`;
  return notRun({ error: CODE.action_expired, message }, 'expired: nobody approved it in time; it was not carried out');
}

/** The user rejected the call: nothing ran; the model reads the note. */
export function rejectedEnd(note: string | null): ToolCallEnd {
  const result = { error: CODE.rejected_by_user, message: 'The user rejected this action; it was not carried out.', note: note ?? null };
  return { content: JSON.stringify(result), summary: `rejected by the user${note ? `: ${note}` : ''}`, streamed: result, ok: false };
}

/** An approved call already started once (the worker died in it): it is not run twice. */
export function outcomeUnknownEnd(): ToolCallEnd {
  const result = {
    error: CODE.outcome_unknown,
    message: 'The worker stopped while this action ran; it may or may not have been carried out. Check before retrying.',
  };
  return notRun(result, `error: ${result.message}`);
}

/** The content the model reads, cut at MAX_TOOL_CONTENT characters. */
export function truncateToolContent(text: string): string {
  return text.length > MAX_TOOL_CONTENT ? `${text.slice(0, MAX_TOOL_CONTENT)}... (truncated)` : text;
}

/**
 * The tool ran (or was refused as the runner). With arguments the approver edited, the model
 * learns that what ran is not what it proposed, and both versions.
 */
export function ranEnd(call: AgentToolCall, edited: Record<string, unknown> | undefined, note: string | null | undefined, outcome: ToolOutcome): ToolCallEnd {
  const told = edited
    ? {
        edited_by_approver: true,
        message: 'The approver changed the arguments before approving: the tool ran with `args`, not with the `proposed_args` you sent.',
        proposed_args: call.args,
        args: edited,
        ...(note ? { note } : {}),
        result: outcome.result,
      }
    : outcome.result;
  return {
    content: truncateToolContent(JSON.stringify(told) ?? 'null'),
    summary: (edited ? 'ran with arguments edited by the approver: ' : '') + summarizeResult(outcome),
    streamed: outcome.result,
    ok: outcome.ok,
  };
}

/** The runner could not be found: the owner (or the approver who edited the call) no longer exists. */
export function noRunnerOutcome(editor: number | undefined): ToolOutcome {
  return { ok: false, result: { error: CODE.forbidden, message: editor ? 'The approver no longer exists' : 'The session owner no longer exists' } };
}

/**
 * Whose rights the call runs with: the owner's; arguments someone else wrote run with that
 * approver's rights instead (an edit is their call, not the owner's: approving must not let
 * anyone reach what only the owner may). Answers the editor, or undefined for the owner.
 */
export function editorOf(action: ActionRow | undefined, ownerId: number): number | undefined {
  const edited = action?.edited_args ?? undefined;
  const approver = action?.decided_by ?? undefined;
  return edited && approver !== undefined && approver !== ownerId ? approver : undefined;
}
