import { randomUUID } from 'node:crypto';
import type { Context } from 'koa';
import { z } from 'zod';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { AppError } from '../platform/errors.js';
import type { Services } from '../services.js';
import type { AgentTurnOutcome } from '../../workflows/defs.js';
import { outcomeData, type AcceptedTurn } from './agent.service.js';
import { publish, turnChannel, type StreamEvent } from './agent.stream.js';

const root = '/api/agent/v1';
const access = { capability: 'svc_agent_use' } as const;

const telemetry = z.object({ tokens_in: z.number().int(), tokens_out: z.number().int(), wall_ms: z.number().int(), cost_usd: z.number() });
const pendingAction = z.object({ action_id: z.string(), tool: z.string(), args: z.record(z.string(), z.unknown()), summary: z.string() });
const turnResponse = z.union([
  z.object({
    outcome: z.literal('answered'),
    assistant_message: z.string(),
    tools_called: z.array(z.object({ name: z.string(), args: z.record(z.string(), z.unknown()), result_summary: z.string() })),
    telemetry,
  }),
  z.object({ outcome: z.literal('gate_pending'), pending_action: pendingAction }),
]);
const sessionView = z.object({
  session_id: z.string(),
  provider_id: z.number().int(),
  provider_type: z.string(),
  model_id: z.string(),
  system_prompt_override: z.string().nullable(),
  owner: z.object({ id: z.number().int(), login: z.string() }),
  created_at: z.string(),
  turn_count: z.number().int(),
  totals: z.object({ tokens_in: z.number().int(), tokens_out: z.number().int(), cost_usd: z.number() }),
  price_known: z.boolean().describe('false when the model has no entry in SVC_AGENT_PRICES (its cost counts as 0)'),
  price_note: z.string().optional(),
  pending_action: pendingAction.nullable(),
  messages: z.array(
    z.object({
      seq: z.number().int(),
      role: z.enum(['user', 'assistant', 'tool', 'decision']),
      content: z.string(),
      tool_calls: z.array(z.object({ id: z.string(), name: z.string(), args: z.record(z.string(), z.unknown()) })).optional(),
      tool: z.string().optional(),
      args: z.record(z.string(), z.unknown()).optional(),
      result_summary: z.string().optional(),
      decision: z.object({ action_id: z.string(), approved: z.boolean(), note: z.string().nullable(), decided_by: z.number().int() }).optional(),
      telemetry: z.record(z.string(), z.unknown()).optional(),
      created_at: z.string(),
    }),
  ),
});
/** The events of a streamed turn, in the order they can come; `done` is always last. */
const streamEvents = ['token', 'tool_call', 'tool_result', 'gate_pending', 'done'];
const turnErrors = {
  409: 'A turn of the session is running (`turn_in_progress`) or its gate waits for a decision (`gate_pending`)',
  502: 'The model provider failed: unreachable, timed out, refused the credential (`provider_auth_failed`), kept answering 429/5xx or sent a malformed answer (`provider_error`); the session stays usable',
};
const decisionBody = z.strictObject({ note: z.string().max(4000).optional(), stream: z.boolean().optional() });

/** What the `done` event carries: the outcome as the JSON answer would give it, plus the telemetry. */
function doneData(outcome: AgentTurnOutcome) {
  const base = { outcome: outcome.outcome, telemetry: outcome.telemetry, tools_called: outcome.tools_called };
  if (outcome.outcome === 'answered') return { ...base, assistant_message: outcome.assistant_message };
  if (outcome.outcome === 'gate_pending') return { ...base, pending_action: outcome.pending_action };
  return { ...base, error: outcome.error };
}

/**
 * Streams one turn as Server-Sent Events. Events published by the activities (tokens, tool calls,
 * tool results) arrive over LISTEN/NOTIFY; the end marker this process publishes after the outcome
 * arrives after all of them (commit order), so `gate_pending` and `done` are always last.
 */
async function streamTurn(services: Services, ctx: Context, start: (channel: string, turnId: string) => Promise<AcceptedTurn>): Promise<void> {
  const turnId = randomUUID();
  const channel = turnChannel(turnId);
  const res = ctx.res;
  let open = false;
  const early: StreamEvent[] = [];
  let endSeen!: () => void;
  const ended = new Promise<void>((resolve) => (endSeen = resolve));
  // A client that went away no longer gets writes; the turn itself goes on in Temporal.
  const write = (event: string, data: unknown) => {
    if (!res.writableEnded && !res.destroyed) res.write(`event: ${event}\ndata: ${JSON.stringify(data ?? null)}\n\n`);
  };
  const unsubscribe = await services.agentStreams.subscribe(channel, (event) => {
    if (event.event === 'end') return endSeen();
    if (open) write(event.event, event.data);
    else early.push(event);
  });
  let turn: AcceptedTurn;
  try {
    turn = await start(channel, turnId);
  } catch (err) {
    await unsubscribe();
    throw err;
  }
  ctx.respond = false;
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
  open = true;
  for (const event of early.splice(0)) write(event.event, event.data);
  let outcome: AgentTurnOutcome;
  try {
    outcome = await turn.outcome;
  } catch (err) {
    // Headers are out, so even a late refusal (a 409 that lost the race in AgentService.accepted)
    // is told in `done`.
    if (!(err instanceof AppError)) services.logger.error({ err }, 'agent turn failed');
    const error = err instanceof AppError ? { code: err.code, message: err.message } : { code: 'internal_error', message: 'The turn failed unexpectedly' };
    outcome = { outcome: 'failed', error, tools_called: [], telemetry: { tokens_in: 0, tokens_out: 0, wall_ms: 0, cost_usd: 0 } };
  }
  await publish(services.sql, channel, { event: 'end', data: null }).catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([ended, new Promise((resolve) => (timer = setTimeout(resolve, 5000)))]);
  clearTimeout(timer);
  await unsubscribe();
  if (outcome.outcome === 'gate_pending') write('gate_pending', outcome.pending_action);
  write('done', doneData(outcome));
  res.end();
}

export function agentRoutes(services: Services): AnyRoute[] {
  const { agent } = services;
  return [
    defineRoute({
      method: 'post',
      path: `${root}/sessions`,
      operationId: 'createAgentSession',
      summary: 'Opens a chat session with a model provider connection (type openai or anthropic)',
      tag: 'agent',
      access,
      body: z.strictObject({
        provider_id: z.number().int().positive(),
        model_id: z.string().trim().min(1).max(200),
        system_prompt_override: z.string().min(1).max(32_000).optional(),
      }),
      invalidCode: 'invalid_request',
      errors: { 400: 'Invalid body, or provider_id is not a connection of type openai/anthropic (`invalid_request`)' },
      responses: { 201: { description: 'Created', data: z.object({ session_id: z.string() }) } },
      handler: async ({ body, principal }) => ({ status: 201, data: await agent.createSession(principal, body) }),
    }),
    defineRoute({
      method: 'get',
      path: `${root}/sessions/{id}`,
      operationId: 'getAgentSession',
      summary: 'Session metadata (provider, model, owner, turns, totals, pending action) and the whole message history',
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
        'With `stream: true` the answer is `text/event-stream` with events `token {delta}`, `tool_call {tool, args}`, `tool_result {tool, result}`, `gate_pending` (the pending action) and `done {outcome, telemetry, ...}` last. A client that disconnects does not stop the turn.',
      tag: 'agent',
      access,
      params: z.object({ id: z.string().max(100) }),
      body: z.strictObject({ content: z.string().min(1), stream: z.boolean().optional() }),
      errors: { ...turnErrors, 413: 'The content is larger than SVC_AGENT_MAX_MESSAGE_BYTES, or the body than SVC_BODY_LIMIT (`payload_too_large`)' },
      responses: { 200: { description: 'The turn outcome', data: turnResponse, alsoContentType: 'text/event-stream', events: streamEvents } },
      handler: async ({ params, body, principal, ctx }) => {
        if (body.stream) {
          await streamTurn(services, ctx, (channel, turnId) => agent.sendMessage(principal, params.id, body.content, channel, turnId));
          return { handled: true };
        }
        const turn = await agent.sendMessage(principal, params.id, body.content);
        return { data: outcomeData(await turn.outcome) };
      },
    }),
    ...(['approve', 'reject'] as const).map((verb) =>
      defineRoute({
        method: 'post',
        path: `${root}/actions/{action_id}/${verb}`,
        operationId: `${verb}AgentAction`,
        summary:
          verb === 'approve'
            ? 'Approves the pending action: the tool runs and the turn goes on to its next outcome'
            : 'Rejects the pending action: the turn goes on with the rejection (and note) as the tool result',
        description: 'Same response shape as a message (an event stream with `stream: true`). An action is decided once (409 `action_already_decided` after); only the session owner or an administrator may decide it.',
        tag: 'agent',
        access,
        params: z.object({ action_id: z.string().max(100) }),
        body: decisionBody,
        bodyOptional: true,
        errors: { ...turnErrors, 409: 'Already decided (`action_already_decided`) or a turn is running (`turn_in_progress`)' },
        responses: { 200: { description: 'The turn outcome', data: turnResponse, alsoContentType: 'text/event-stream', events: streamEvents } },
        handler: async ({ params, body, principal, ctx }) => {
          if (body.stream) {
            await streamTurn(services, ctx, (channel) => agent.decide(principal, params.action_id, verb === 'approve', body.note, channel));
            return { handled: true };
          }
          const turn = await agent.decide(principal, params.action_id, verb === 'approve', body.note);
          return { data: outcomeData(await turn.outcome) };
        },
      }),
    ),
  ];
}
