import { z } from 'zod';
import { named } from '../http/openapi.js';
import { AGENT_ACTION_STATUSES } from '../../workflows/defs.js';

// The API's view of a workflow approval (the inbox item, the action endpoint, a decision's answer).

const user = z.object({ id: z.number().int(), login: z.string() });

export const workflowActionView = z.object({
  source: z.literal('workflow'),
  action_id: z.string(),
  execution_id: z.number().int().describe('The run that asked'),
  workflow_id: z.number().int(),
  node_id: z.string().describe('The approval node of that run'),
  summary: z.string(),
  details: z.unknown().describe('What the node shows besides its summary (any JSON); null when none'),
  fields: z.record(z.string(), z.unknown()).describe('The fields as they stand: as the run gave them, with the edits of the approvals so far'),
  editable: z
    .record(z.string(), z.unknown())
    .nullable()
    .describe('The JSON Schema an approver’s edits of `fields` must satisfy (its `properties` are the editable fields); null: nothing is editable'),
  status: z.enum(AGENT_ACTION_STATUSES),
  required: z.number().int().describe('Distinct approvals that approve it (the first rejection rejects it)'),
  approvals: z.number().int().describe('Approvals so far'),
  approvers: z
    .object({ users: z.array(user), capabilities: z.array(z.string()) })
    .describe('Who may decide: these users and whoever holds one of these capabilities (an escalation adds to them)'),
  self_approval: z
    .boolean()
    .describe('false: the people the run acts for (owner, author of its version, who started it) may not decide, administrators included'),
  requested_by: user.describe('The owner of the workflow whose run asked'),
  created_at: z.string(),
  age_seconds: z.number().int(),
  expires_at: z.string(),
  decided_at: z.string().nullable().describe('When it was approved, rejected, expired or cancelled'),
  decided_by: z
    .array(
      z.object({
        id: z.number().int(),
        login: z.string(),
        decision: z.enum(['approved', 'rejected']),
        note: z.string().nullable(),
        at: z.string(),
        fields: z.record(z.string(), z.unknown()).nullable().describe('What this approver changed of the fields'),
      }),
    )
    .describe('Each approver’s decision, in order'),
  approve_url: z
    .string()
    .optional()
    .describe('Only to an approver who may still decide it: their own link to the approval page (a credential: do not share it)'),
});
named(workflowActionView, 'WorkflowApprovalAction', {
  description: 'An approval asked by a workflow run: an action on the same gate as the agent’s, decided by its approvers',
  examples: [
    {
      source: 'workflow',
      action_id: '6a4f2c1e-8b3d-4e5f-9a0b-1c2d3e4f5a6b',
      execution_id: 42,
      workflow_id: 7,
      node_id: 'manager',
      summary: 'Expense of 1800.00 EUR by ada',
      details: { purpose: 'Conference travel' },
      fields: { amount: 1800, category: 'travel' },
      editable: { type: 'object', properties: { amount: { type: 'number', minimum: 0, maximum: 1800 } } },
      status: 'pending',
      required: 1,
      approvals: 0,
      approvers: { users: [{ id: 3, login: 'grace' }], capabilities: [] },
      self_approval: false,
      requested_by: { id: 2, login: 'ada' },
      created_at: '2025-01-01T12:00:00.000Z',
      age_seconds: 60,
      expires_at: '2025-01-04T12:00:00.000Z',
      decided_at: null,
      decided_by: [],
    },
  ],
});
