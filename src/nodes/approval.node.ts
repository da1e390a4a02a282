import { z } from 'zod';
import { editableSchemaProblem, MAX_FIELDS_BYTES } from '../approvals/editable-fields.js';
import { capabilities } from '../auth/capabilities.js';
import type { NodeType } from './node-type.js';

const MAX_WAIT_MS = 366 * 24 * 3600 * 1000;
/** The shortest reminder or escalation interval (a durable timer each; they are not a polling loop). */
export const MIN_NOTICE_INTERVAL_MS = 1000;
/** Reminders an approval sends at most: its history stays a few hundred events however long it waits. */
export const MAX_REMINDERS = 25;
/** Approvers a node may name, and approvals it may require. */
const MAX_APPROVERS = 50;
export const MAX_REQUIRED = 20;

const login = z.string().min(1).max(200);
/** Who decides: named users (logins, or expressions giving logins), or whoever holds a capability. */
const approvers = z.union([z.strictObject({ users: z.array(login).min(1).max(MAX_APPROVERS) }), z.strictObject({ capability: z.enum(capabilities) })]);

/** A JSON Schema over the fields; stored, it may hold expressions, and is compiled once they are evaluated. */
const editable = (templates: boolean) =>
  z
    .record(z.string(), z.unknown())
    .superRefine((schema, ctx) => {
      const problem = editableSchemaProblem(schema, { templates });
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    })
    .optional();

const common = {
  details: z.unknown().optional(),
  approvers,
  required: z.number().int().min(1).max(MAX_REQUIRED).default(1),
  self_approval: z.boolean().default(false),
  timeout_ms: z.number().int().min(1).max(MAX_WAIT_MS),
  notify: z.strictObject({ connection_id: z.number().int().positive().max(2_147_483_647), path: z.string().max(2000) }).optional(),
  remind_every_ms: z.number().int().min(MIN_NOTICE_INTERVAL_MS).max(MAX_WAIT_MS).optional(),
  escalate_after_ms: z.number().int().min(MIN_NOTICE_INTERVAL_MS).max(MAX_WAIT_MS).optional(),
  escalate_to: approvers.optional(),
};

type Config = z.infer<z.ZodObject<typeof common>> & { summary: string; fields: Record<string, unknown>; editable?: Record<string, unknown> };

/** The rules between the fields, for the stored configuration and again once its expressions are evaluated. */
function checkShape(config: Record<string, unknown>, ctx: z.RefinementCtx): void {
  const c = config as Partial<Config>;
  if ((c.escalate_after_ms === undefined) !== (c.escalate_to === undefined)) {
    ctx.addIssue({
      code: 'custom',
      path: [c.escalate_to === undefined ? 'escalate_to' : 'escalate_after_ms'],
      message: 'escalate_after_ms and escalate_to go together',
    });
  }
  if (c.remind_every_ms !== undefined && c.notify === undefined) {
    ctx.addIssue({ code: 'custom', path: ['remind_every_ms'], message: 'reminders are posted through notify: set notify too' });
  }
  const users = c.approvers && 'users' in c.approvers ? c.approvers.users : undefined;
  if (users && !c.escalate_to && (c.required ?? 1) > new Set(users).size) {
    ctx.addIssue({ code: 'custom', path: ['required'], message: `needs ${c.required} distinct approvers but approvers.users names ${new Set(users).size}` });
  }
  if (c.fields !== undefined && JSON.stringify(c.fields).length > MAX_FIELDS_BYTES) {
    ctx.addIssue({ code: 'custom', path: ['fields'], message: `must be at most ${MAX_FIELDS_BYTES} bytes of JSON` });
  }
}

/**
 * A step a person decides: an action on the same gate as the agent's (one inbox, one decision
 * endpoint, one audit trail), with distinct approvers, no self-approval by default, fields the
 * approvers may edit under a JSON Schema, an expiry, and reminders and an escalation on durable
 * timers (workflows/approval.ts).
 */
export const approvalNode: NodeType<Config> = {
  type: 'approval',
  pure: false,
  runsAs: 'approval',
  description:
    'config `{summary, details?, fields?, editable?, approvers, required?, self_approval?, timeout_ms, notify?, remind_every_ms?, escalate_after_ms?, escalate_to?}`: asks `approvers` (`{users: [logins]}` or `{capability}`) to decide, in the inbox GET /api/agent/v1/actions and on each approver\'s page; `required` distinct approvals (default 1) approve it, the first rejection rejects it, `timeout_ms` expires it; the people the run acts for may not decide unless `self_approval` is true; `editable` (a JSON Schema over `fields`) says what approvers may change; `notify: {connection_id, path}` posts the approvers\' links, again every `remind_every_ms` (at most 25 times), and `escalate_after_ms` adds `escalate_to` as approvers. Edges carry `branch: "approved"`, `"rejected"` or `"expired"`. Output `{decision, fields, decided_by: [{login, decision, note, at}], branch}`.',
  configSchema: z
    .strictObject({ summary: z.string().min(1).max(2000), fields: z.record(z.string(), z.unknown()).default({}), editable: editable(true), ...common })
    .superRefine(checkShape),
  resolvedSchema: z
    .object({
      summary: z.string().min(1).max(2000),
      fields: z.record(z.string(), z.unknown()).default({}),
      editable: editable(false),
      ...common,
    })
    .superRefine(checkShape) as unknown as z.ZodType<Config>,
  branches: () => ['approved', 'rejected', 'expired'],
  references: (config) => {
    const c = config as Partial<Config>;
    const logins = (field: string, a: Config['approvers'] | undefined) =>
      a && 'users' in a ? a.users.filter((l) => !l.includes('{{')).map((l, i) => ({ login: l, field: `${field}.users.${i}` })) : [];
    return {
      connections: c.notify ? [{ id: c.notify.connection_id, field: 'notify.connection_id' }] : [],
      logins: [...logins('approvers', c.approvers), ...logins('escalate_to', c.escalate_to)],
    };
  },
};
