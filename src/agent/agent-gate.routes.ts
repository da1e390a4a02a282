import { z } from 'zod';
import { defineRoute, type AnyRoute, type RouteErrors } from '../http/route.js';
import { pageOf, pagination } from '../http/pagination.js';
import { AGENT_ACTION_STATUSES } from '../../workflows/defs.js';
import { agentAccess as access, agentRoot as root, turnErrors } from './agent.routes.js';
import { actionView, decisionEvents, decisionResponse, gateAction } from './agent.schemas.js';
import { workflowActionView } from '../approvals/approval.schemas.js';
import type { ApprovalService } from '../approvals/approval.service.js';
import { streamTurn, type TurnStreamPorts } from './agent.sse.js';
import type { AgentGateService } from './agent.gate.js';
import { outcomeData } from './agent.turns.js';

const actionParams = z.object({ action_id: z.string().max(100) });
const note = z.string().max(4000).optional();
const decisionErrors = {
  ...turnErrors,
  forbidden:
    "Missing capability svc_agent_use, or the session's approval policy does not let the caller decide (data.approval): `owner` only its owner, `others` anyone with svc_agent_approve but the owner, `any` both; for a workflow approval, the caller is not an approver, or is one of the people its run acts for and `self_approval` is off (data.self_approval)",
  action_already_decided: 'The action was already decided (or closed when the session ended, or its run was cancelled)',
  action_expired: 'The action expired before it was decided',
  approver_already_decided: 'A workflow approval: the caller decided it already; it waits for its other approvers',
} satisfies RouteErrors;

/** The side-effect gate: approve (optionally with edited arguments), reject, the inbox and the audit trail. */
export function agentGateRoutes(services: { agentGate: AgentGateService; approvals: ApprovalService } & TurnStreamPorts): AnyRoute[] {
  const { agentGate, approvals } = services;
  const decide = (verb: 'approve' | 'reject') =>
    defineRoute({
      method: 'post',
      path: `${root}/actions/{action_id}/${verb}`,
      operationId: `${verb}AgentAction`,
      summary:
        verb === 'approve'
          ? 'Approves the pending action, optionally with edited arguments: the tool runs and the turn goes on to its next outcome'
          : 'Rejects the pending action: the turn goes on with the rejection (and note) as the tool result',
      description:
        (verb === 'approve'
          ? "`args` replaces the model's arguments; it is validated against the tool's schema and as the tool would check it, with the approver's rights (400 `validation_failed` naming each field, 403 `forbidden` naming a missing capability; the action stays pending), both versions are kept, and the model is told the arguments were edited. "
          : '') +
        "To the session's owner, the same response as a message (an event stream with `stream: true`). To anyone else `outcome: decided`: the action as decided, with the tool's outcome, and where the turn went (`turn`, and the next `pending_action` when it waits at another gate), not the rest of the turn, which runs with the owner's rights (its later tool calls and the model's answer are in the owner's session). An action is decided once (409 `action_already_decided` after) and not after it expired (409 `action_expired`). Who may decide follows the session's approval policy. " +
        'A workflow approval (`source: "workflow"`) is decided here too, by its approvers: each decides once (409 `approver_already_decided`), the people its run acts for only with `self_approval` (403 otherwise, administrators included), ' +
        (verb === 'approve'
          ? "`fields` changes its editable fields (400 `validation_failed` naming each field the node's `editable` schema refuses; the action stays pending), "
          : '') +
        'and the answer is 202 with the approval as it now stands (its run goes on by itself); it takes neither `args` nor `stream`.',
      tag: 'agent',
      access,
      params: actionParams,
      body:
        verb === 'approve'
          ? z.strictObject({
              note,
              args: z.record(z.string(), z.unknown()).optional(),
              fields: z.record(z.string(), z.unknown()).optional().describe('A workflow approval: new values of its editable fields'),
              stream: z.boolean().optional(),
            })
          : z.strictObject({ note, stream: z.boolean().optional() }),
      bodyOptional: true,
      errors: decisionErrors,
      responses: {
        200: {
          description: "The turn outcome (for a decider who is not the session's owner, the decision), or with `stream: true` an event stream",
          data: decisionResponse,
          eventStream: decisionEvents,
        },
        202: {
          description: 'A workflow approval: the decision is recorded and the approval is answered as it now stands; its run goes on by itself',
          data: workflowActionView,
        },
      },
      handler: async ({ params, body, principal, ctx }) => {
        // A workflow approval is decided by its own service; the run goes on by itself.
        const fields = 'fields' in body ? (body.fields as Record<string, unknown> | undefined) : undefined;
        const args = 'args' in body ? body.args : undefined;
        const approval = await approvals.decideIfWorkflow(
          principal,
          params.action_id,
          { approved: verb === 'approve', note: body.note, fields, args, stream: body.stream },
          ctx.origin,
        );
        if (approval) return { status: 202, data: approval };
        const decision = {
          approved: verb === 'approve',
          note: body.note,
          args: 'args' in body ? (body.args as Record<string, unknown> | undefined) : undefined,
        };
        if (body.stream) {
          await streamTurn(services, ctx, (channel) => agentGate.decide(principal, params.action_id, decision, channel));
          return { handled: true };
        }
        const turn = await agentGate.decide(principal, params.action_id, decision);
        const outcome = await turn.outcome;
        return { data: turn.decided ? await turn.decided(outcome) : outcomeData(outcome) };
      },
    });
  return [
    decide('approve'),
    decide('reject'),
    defineRoute({
      method: 'get',
      path: `${root}/actions`,
      operationId: 'listAgentActions',
      summary: 'The approval inbox: actions the caller may decide or has decided, newest first',
      description:
        "Pending actions of the caller's own sessions (policy `owner` or `any`), of other users' sessions whose policy is `others` or `any` when the caller holds svc_agent_approve, every workflow approval naming the caller (or a capability they hold) as an approver, unless it was asked by a run they act for and its `self_approval` is off, and every action the caller decided. Each item says its `source` (`agent` or `workflow`). Without `status` or `source`, all of them.",
      tag: 'agent',
      access,
      query: z.strictObject({ status: z.enum(AGENT_ACTION_STATUSES).optional(), source: z.enum(['agent', 'workflow']).optional(), ...pagination(100) }),
      responses: { 200: { description: 'A page of actions', data: pageOf(gateAction) } },
      handler: async ({ query, principal, ctx }) => ({ data: await agentGate.inbox(principal, query, ctx.origin) }),
    }),
    defineRoute({
      method: 'get',
      path: `${root}/actions/{action_id}`,
      operationId: 'getAgentAction',
      summary: 'One action with its audit trail: who decided, when, the note, both argument versions and the tool outcome',
      description:
        "Visible to whoever may decide it, the session owner (for a workflow approval: the people its run acts for), administrators and whoever decided it; for anyone else 404. A workflow approval carries `approve_url`, the caller's own link to its page, while the caller may still decide it.",
      tag: 'agent',
      access,
      params: actionParams,
      responses: { 200: { description: 'The action', data: gateAction } },
      handler: async ({ params, principal, ctx }) => ({ data: await agentGate.action(principal, params.action_id, ctx.origin) }),
    }),
    defineRoute({
      method: 'get',
      path: `${root}/sessions/{id}/actions`,
      operationId: 'listAgentSessionActions',
      summary: "The session's audit trail of gated actions, oldest first",
      description: 'Visible to the session owner, administrators and those who may decide its actions; for anyone else 404.',
      tag: 'agent',
      access,
      params: z.object({ id: z.string().max(100) }),
      query: z.strictObject(pagination(100)),
      responses: { 200: { description: 'A page of actions', data: pageOf(actionView) } },
      handler: async ({ params, query, principal }) => ({ data: await agentGate.sessionActions(principal, params.id, query.page, query.per_page) }),
    }),
  ];
}
