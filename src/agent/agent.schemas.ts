import { z } from 'zod';
import { AGENT_ACTION_STATUSES, AGENT_APPROVAL_POLICIES } from '../../workflows/defs.js';

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
export const turnResponse = z.union([
  z.object({
    outcome: z.literal('answered'),
    assistant_message: z.string(),
    tools_called: z.array(z.object({ name: z.string(), args, result_summary: z.string() })),
    telemetry,
  }),
  z.object({ outcome: z.literal('gate_pending'), pending_action: pendingAction }),
]);

/** The events of a streamed turn, in the order they can come; `done` is always last. */
export const streamEvents = ['token', 'tool_call', 'tool_result', 'gate_pending', 'done'];

const user = z.object({ id: z.number().int(), login: z.string() });

/** One gated action: the inbox item, the audit entry and the action itself. Never rewritten once decided. */
export const actionView = z.object({
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

export const decisionRecord = z.object({
  action_id: z.string(),
  status: z.enum(['approved', 'rejected', 'expired']),
  approved: z.boolean(),
  note: z.string().nullable(),
  decided_by: z.number().int().nullable(),
  edited_args: args.optional(),
});

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
