import { z } from 'zod';
import { MAX_GATE_TTL_SECONDS } from '../config.js';
import { defineRoute, type AnyRoute, type RouteErrors } from '../http/route.js';
import { AGENT_APPROVAL_POLICIES } from '../../workflows/defs.js';
import { sessionView, turnEvents, turnResponse } from './agent.schemas.js';
import { streamTurn, type TurnStreamPorts } from './agent.sse.js';
import type { AgentService } from './agent.service.js';
import type { AgentGateService } from './agent.gate.js';
import { outcomeData } from './agent.turns.js';

export const agentRoot = '/api/agent/v1';
export const agentAccess = { capability: 'svc_agent_use' } as const;

/** The codes of a turn's outcome, answered by a message and by a decision on a pending action. */
export const turnErrors = {
  turn_in_progress: 'A turn of the session is running',
  gate_pending: 'The session waits for a decision on its pending action',
  action_not_approved: 'A gated tool call found no matching approved action',
  provider_error: 'The model provider failed: unreachable, timed out, kept answering 429/5xx or sent a malformed answer; the session stays usable',
  provider_auth_failed: 'The model provider refused the credential; the session stays usable',
  egress_denied: { status: 502, when: "The egress policy refused the model provider's address; nothing was sent" },
  response_too_large: "The model's answer was larger than SVC_EGRESS_RESPONSE_LIMIT; it was not read past the limit",
  tool_call_limit: 'The model asked for more tool calls in one answer than SVC_AGENT_MAX_TOOL_CALLS; none ran',
} satisfies RouteErrors;

/** Sessions and their messages; the gate's routes are in agent-gate.routes.ts. */
export function agentRoutes(services: { agent: AgentService; agentGate: AgentGateService } & TurnStreamPorts): AnyRoute[] {
  const { agent, agentGate } = services;
  const root = agentRoot;
  const access = agentAccess;
  return [
    defineRoute({
      method: 'post',
      path: `${root}/sessions`,
      operationId: 'createAgentSession',
      summary: 'Opens a chat session with a model provider connection (type openai or anthropic)',
      description:
        '`approval` says who decides the pending actions: `owner` (default; only the session owner), `others` (four eyes: anyone holding svc_agent_approve except the owner) or `any` (the owner or anyone holding svc_agent_approve). `gate_ttl_s` is how long a pending action waits before it expires (default SVC_AGENT_GATE_TTL). With `budget_usd`, messages are refused with 409 `budget_exceeded` once the session has cost that much (0 refuses every turn).',
      tag: 'agent',
      access,
      body: z.strictObject({
        provider_id: z.number().int().positive(),
        model_id: z.string().trim().min(1).max(200),
        system_prompt_override: z.string().min(1).max(32_000).optional(),
        approval: z.enum(AGENT_APPROVAL_POLICIES).optional(),
        gate_ttl_s: z.number().int().min(1).max(MAX_GATE_TTL_SECONDS).optional(),
        budget_usd: z.number().min(0).max(1_000_000).optional(),
      }),
      invalidCode: 'invalid_request',
      errors: {
        invalid_request: 'Invalid body, or provider_id is not a connection of type openai/anthropic',
        rate_limited: 'The caller opened SVC_AGENT_MAX_SESSIONS_PER_HOUR sessions within the last hour, see Retry-After',
      },
      responses: { 201: { description: 'Created', data: z.object({ session_id: z.string() }) } },
      handler: async ({ body, principal }) => ({ status: 201, data: await agent.createSession(principal, body) }),
    }),
    defineRoute({
      method: 'get',
      path: `${root}/sessions/{id}`,
      operationId: 'getAgentSession',
      summary: 'Session metadata (provider, model, owner, policy, turns, tokens and cost so far, budget, pending action) and the whole message history',
      description: 'Only the owner and administrators see a session; for anyone else it does not exist (404).',
      tag: 'agent',
      access,
      params: z.object({ id: z.string().max(100) }),
      responses: { 200: { description: 'The session', data: sessionView } },
      handler: async ({ params, principal }) => ({ data: await agent.view(principal, params.id) }),
    }),
    defineRoute({
      method: 'post',
      path: `${root}/sessions/{id}/messages`,
      operationId: 'sendAgentMessage',
      summary: 'Sends a user message; answers the turn outcome (answered or gate_pending), or streams it with `stream: true`',
      description:
        'With `stream: true` the answer is `text/event-stream` with events `token {delta}`, `tool_call {tool, args}`, `tool_result {tool, result}`, `gate_pending` (the pending action) and `done {outcome, telemetry, ..., expired_actions}` last; `expired_actions` lists the actions that expired since the previous message (the model was told and went on; its answer is in the history). A client that disconnects does not stop the turn.',
      tag: 'agent',
      access,
      params: z.object({ id: z.string().max(100) }),
      body: z.strictObject({ content: z.string().min(1), stream: z.boolean().optional() }),
      errors: {
        ...turnErrors,
        budget_exceeded: 'The session reached its budget_usd',
        payload_too_large: 'The content is larger than SVC_AGENT_MAX_MESSAGE_BYTES, or the body than SVC_BODY_LIMIT',
        rate_limited: 'With `stream: true`: the caller holds SVC_AGENT_MAX_STREAMS_PER_USER streams open on this server already',
      },
      responses: { 200: { description: 'The turn outcome, or with `stream: true` the turn as an event stream', data: turnResponse, eventStream: turnEvents } },
      handler: async ({ params, body, principal, ctx }) => {
        if (body.stream) {
          await streamTurn(
            services,
            ctx,
            (channel, turnId) => agent.sendMessage(principal, params.id, body.content, channel, turnId),
            async (turnId) => ({ expired_actions: await agentGate.expiredBefore(params.id, turnId) }),
          );
          return { handled: true };
        }
        const turn = await agent.sendMessage(principal, params.id, body.content);
        return { data: outcomeData(await turn.outcome) };
      },
    }),
  ];
}
