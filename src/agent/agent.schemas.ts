import { z } from 'zod';
import { named } from '../http/openapi.js';
import type { EventStreamSpec } from '../http/route.js';
import { AGENT_ACTION_STATUSES, AGENT_APPROVAL_POLICIES } from '../../workflows/defs.js';
import { workflowActionView } from '../approvals/approval.schemas.js';

// Response and event schemas of the agent surface, shared by its route modules; they feed the
// OpenAPI document, and the tests check real answers against it.

const args = z.record(z.string(), z.unknown());
export const telemetry = z.object({ tokens_in: z.number().int(), tokens_out: z.number().int(), wall_ms: z.number().int(), cost_usd: z.number() });
export const pendingAction = z.object({
  action_id: z.string(),
  tool: z.string(),
  args,
  summary: z.string(),
  expires_at: z.string().nullable().optional().describe('When the action expires unless decided (null: it does not expire)'),
});
named(telemetry, 'AgentTelemetry', { description: 'Tokens, wall time and cost of a turn' });
named(pendingAction, 'AgentPendingAction', {
  description: 'A side effect the model asked for, waiting for a decision (approve or reject)',
  examples: [
    {
      action_id: 'f3a1c2d4-5b6e-4f70-8a9b-0c1d2e3f4a5b',
      tool: 'records_create',
      args: { entity: 'note', fields: { title: 'Call Ada' } },
      summary: 'Create a note record: title "Call Ada"',
      expires_at: '2025-01-01T12:15:00.000Z',
    },
  ],
});
const toolCalled = named(z.object({ name: z.string(), args, result_summary: z.string() }), 'AgentToolCalled', {
  description: 'A tool the model called in the turn',
});
const user = z.object({ id: z.number().int(), login: z.string() });

/** One gated action: the inbox item, the audit entry and the action itself. Never rewritten once decided. */
export const actionView = z.object({
  source: z.literal('agent'),
  action_id: z.string(),
  session_id: z.string(),
  turn_id: z.string(),
  tool: z.string(),
  args: args.describe('The arguments the model proposed'),
  edited_args: args.nullable().describe('The arguments the approver replaced them with (the tool ran with these); null when not edited'),
  summary: z.string(),
  status: z.enum(AGENT_ACTION_STATUSES),
  approval: z.enum(AGENT_APPROVAL_POLICIES).describe("The session's approval policy"),
  requested_by: user.describe('The session owner, on whose behalf the model asked'),
  created_at: z.string(),
  age_seconds: z.number().int(),
  expires_at: z.string().nullable(),
  decided_by: user.nullable().describe('null while pending and for an expiry'),
  decided_at: z.string().nullable().describe('When it was approved, rejected or expired'),
  note: z.string().nullable(),
  outcome: z
    .object({ ok: z.boolean(), result_summary: z.string(), finished_at: z.string().nullable() })
    .nullable()
    .describe("The tool's outcome (for a rejection or an expiry: what the model was told); null until then"),
});
named(actionView, 'AgentAction', { description: 'A gated action: the inbox item, the audit entry and the action itself' });

export const turnResponse = z.discriminatedUnion('outcome', [
  named(z.object({ outcome: z.literal('answered'), assistant_message: z.string(), tools_called: z.array(toolCalled), telemetry }), 'AgentTurnAnswered', {
    description: 'The model answered',
  }),
  named(z.object({ outcome: z.literal('gate_pending'), pending_action: pendingAction }), 'AgentTurnGatePending', {
    description: 'The model asked for a side effect; the turn waits for a decision on it',
  }),
]);
named(turnResponse, 'AgentTurnOutcome', { description: 'How a turn ended, answered as JSON (a failed turn is an error answer)' });

/**
 * What a decider who is not the session's owner is answered: the decision and the decided tool's
 * outcome, not what the turn went on to do with the owner's rights (its later tool calls and the
 * model's text, which can carry what those calls read); the owner sees all of it in the session.
 */
const decidedFields = {
  action: actionView.describe('The action as decided, with the tool’s outcome (as GET /actions/{action_id} shows it)'),
  turn: z
    .enum(['answered', 'gate_pending', 'failed'])
    .describe("Where the owner's turn went after the decision; what it did is the owner's to see (GET /sessions/{id})"),
  pending_action: pendingAction.optional().describe('With `turn: gate_pending`: the next action waiting for a decision, which the caller may decide too'),
};
const decided = named(z.object({ outcome: z.literal('decided'), ...decidedFields }), 'AgentTurnDecided', {
  description: "Answered to a decider who is not the session's owner: the decision and the decided tool's outcome, not the rest of the owner's turn",
});
export const decisionResponse = z.discriminatedUnion('outcome', [...turnResponse.options, decided]);
named(decisionResponse, 'AgentDecisionOutcome', {
  description: "How a turn went on after a decision: as for a message to the session's owner; `decided` to anyone else",
});

const truncated = named(
  z.object({ truncated: z.literal(true), preview: z.string().describe('The start of the JSON text of the data') }),
  'AgentTruncatedEventData',
  { description: 'Data too large to stream (over 7000 bytes), cut to its start' },
);
const expiredAction = named(z.object({ action_id: z.string(), tool: z.string(), summary: z.string(), expired_at: z.string() }), 'AgentExpiredAction', {
  description: 'A pending action that expired undecided',
});
const doneFields = {
  telemetry,
  tools_called: z.array(toolCalled),
  expired_actions: z
    .array(expiredAction)
    .optional()
    .describe('Message turns: the actions that expired since the previous message (the model was told and went on)'),
};
const done = z.discriminatedUnion('outcome', [
  named(z.object({ outcome: z.literal('answered'), assistant_message: z.string(), ...doneFields }), 'AgentDoneAnswered', { description: 'The model answered' }),
  named(z.object({ outcome: z.literal('gate_pending'), pending_action: pendingAction, ...doneFields }), 'AgentDoneGatePending', {
    description: 'The turn waits for a decision on the pending action',
  }),
  named(z.object({ outcome: z.literal('failed'), error: z.object({ code: z.string(), message: z.string() }), ...doneFields }), 'AgentDoneFailed', {
    description: 'The turn failed; `error.code` is the code the JSON answer would have had (`provider_error`, say)',
  }),
]);
named(done, 'AgentDoneData', { description: 'How the turn ended, with its telemetry; always the last event' });
const decisionDone = z.discriminatedUnion('outcome', [
  ...done.options,
  named(z.object({ outcome: z.literal('decided'), ...decidedFields }), 'AgentDoneDecided', {
    description: "To a decider who is not the session's owner: the decision and the decided tool's outcome",
  }),
]);
named(decisionDone, 'AgentDecisionDoneData', {
  description: "How the turn ended: as for a message to the session's owner (with its telemetry); `decided` to anyone else",
});

/**
 * The events of a streamed turn (`stream: true`), in the order they can come: `token`, `tool_call`
 * and `tool_result` while the turn runs, `gate_pending` when it waits for a decision, `done`
 * always last. `agent.sse.ts` writes them; their data is JSON text.
 */
export const turnEvents: EventStreamSpec = {
  name: 'AgentStreamEvent',
  description:
    'One event of a streamed turn (`stream: true`): `token`, `tool_call` and `tool_result` while the turn runs, `gate_pending` when it waits for a decision, `done` always last. On the wire each is `event: <name>` and a `data:` line of JSON.',
  events: {
    token: z.union([named(z.object({ delta: z.string() }), 'AgentTokenData', { description: 'A piece of the answer text' }), truncated]),
    tool_call: z.union([named(z.object({ tool: z.string(), args }), 'AgentToolCallData', { description: 'The model calls a tool' }), truncated]),
    tool_result: z.union([
      named(z.object({ tool: z.string(), result: z.unknown() }), 'AgentToolResultData', { description: 'What a tool answered' }),
      truncated,
    ]),
    gate_pending: pendingAction,
    done,
  },
};

/**
 * The events of a streamed decision: those of a message turn to the session's owner. Anyone
 * else gets no `token`, `tool_call` or `tool_result` (the turn's later steps run with the
 * owner's rights), only `gate_pending` when the turn waits at another gate and `done` with
 * the decision.
 */
export const decisionEvents: EventStreamSpec = {
  name: 'AgentDecisionStreamEvent',
  description:
    "One event of a streamed decision (`stream: true`): to the session's owner the turn's events as for a message; to anyone else only `gate_pending` (when the turn waits at another gate) and `done` with `outcome: decided`.",
  events: { ...turnEvents.events, done: decisionDone },
};

/** What the gate holds: an agent's gated tool call, or a workflow run's approval (`source`). */
export const gateAction = z.discriminatedUnion('source', [actionView, workflowActionView]);
named(gateAction, 'GateAction', {
  description: 'An action on the gate: an agent’s gated tool call (`source: "agent"`) or a workflow run’s approval (`"workflow"`)',
});

export const decisionRecord = z.object({
  action_id: z.string(),
  status: z.enum(['approved', 'rejected', 'expired']),
  approved: z.boolean(),
  note: z.string().nullable(),
  decided_by: z.number().int().nullable(),
  edited_args: args.optional(),
});
named(decisionRecord, 'AgentDecision', { description: 'A decision on a gated action, as the history records it' });

export const sessionView = z.object({
  session_id: z.string(),
  provider_id: z.number().int(),
  provider_type: z.string(),
  model_id: z.string(),
  system_prompt_override: z.string().nullable(),
  owner: user,
  created_at: z.string(),
  turn_count: z.number().int(),
  approval: z.enum(AGENT_APPROVAL_POLICIES),
  gate_ttl_s: z.number().int().describe('Seconds a pending action waits before it expires'),
  totals: z.object({ tokens_in: z.number().int(), tokens_out: z.number().int(), cost_usd: z.number() }).describe('Tokens and cost of the session so far'),
  budget_usd: z.number().nullable(),
  budget_exceeded: z.boolean().describe('true once totals.cost_usd reached budget_usd: new messages are refused with 409 budget_exceeded'),
  price_known: z.boolean().describe('false when the model has no entry in SVC_AGENT_PRICES (its cost counts as 0)'),
  price_note: z.string().optional(),
  pending_action: pendingAction.nullable(),
  messages: z.array(
    z.object({
      seq: z.number().int(),
      role: z.enum(['user', 'assistant', 'tool', 'decision']),
      content: z.string(),
      tool_calls: z.array(z.object({ id: z.string(), name: z.string(), args })).optional(),
      tool: z.string().optional(),
      args: args.optional(),
      result_summary: z.string().optional(),
      decision: decisionRecord.optional(),
      telemetry: z.record(z.string(), z.unknown()).optional(),
      created_at: z.string(),
    }),
  ),
});
named(sessionView, 'AgentSession', { description: 'A chat session: its settings, totals, pending action and whole history' });
named(sessionView.shape.messages.element, 'AgentMessage', {
  description: 'One entry of the history: a user or assistant message, a tool result or a decision',
});
