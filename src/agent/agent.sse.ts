import { randomUUID } from 'node:crypto';
import type { Context } from 'koa';
import { AppError } from '../platform/errors.js';
import type { Queryable } from '../db/sql.js';
import type { Logger } from '../platform/logger.js';
import type { TurnStreamHub } from './agent.stream.js';

/** What streaming a turn needs: the LISTEN side, the NOTIFY side, the log. */
export interface TurnStreamPorts {
  agentStreams: TurnStreamHub;
  sql: Queryable;
  logger: Logger;
}
import type { AgentTurnOutcome } from '../../workflows/defs.js';
import { publish, turnChannel, type StreamEvent } from './agent.stream.js';
import type { AcceptedTurn, DecidedData } from './agent.turns.js';
import { CODE } from '../../workflows/error-codes.js';

/** What the `done` event carries: the outcome as the JSON answer would give it, plus the telemetry. */
function doneData(outcome: AgentTurnOutcome) {
  const base = { outcome: outcome.outcome, telemetry: outcome.telemetry, tools_called: outcome.tools_called };
  if (outcome.outcome === 'answered') return { ...base, assistant_message: outcome.assistant_message };
  if (outcome.outcome === 'gate_pending') return { ...base, pending_action: outcome.pending_action };
  return { ...base, error: outcome.error };
}

/** The `done` of a decider who is not the session's owner: the decision, or the error it ended with. */
async function decidedDone(
  turn: AcceptedTurn,
  outcome: AgentTurnOutcome,
  services: TurnStreamPorts,
): Promise<Record<string, unknown> & { pending_action?: unknown }> {
  try {
    return (await turn.decided!(outcome)) as DecidedData & Record<string, unknown>;
  } catch (err) {
    if (!(err instanceof AppError)) services.logger.error({ err }, 'agent decision failed');
    const error = err instanceof AppError ? { code: err.code, message: err.message } : { code: CODE.internal_error, message: 'The turn failed unexpectedly' };
    return { outcome: 'failed', error, tools_called: [], telemetry: { tokens_in: 0, tokens_out: 0, wall_ms: 0, cost_usd: 0 } };
  }
}

/**
 * Streams one turn as Server-Sent Events. Events published by the activities (tokens, tool calls,
 * tool results) arrive over LISTEN/NOTIFY; the end marker this process publishes after the outcome
 * arrives after all of them (commit order), so `gate_pending` and `done` are always last.
 */
export async function streamTurn(
  services: TurnStreamPorts,
  ctx: Context,
  start: (channel: string, turnId: string) => Promise<AcceptedTurn>,
  /** More for `done` once the turn ended (a message turn: the actions that expired before it). */
  moreDone?: (turnId: string) => Promise<Record<string, unknown>>,
): Promise<void> {
  const release = services.agentStreams.claimStream((ctx.state.principal as { id: number }).id);
  try {
    await streamOpenTurn(services, ctx, start, moreDone);
  } finally {
    release();
  }
}

async function streamOpenTurn(
  services: TurnStreamPorts,
  ctx: Context,
  start: (channel: string, turnId: string) => Promise<AcceptedTurn>,
  moreDone?: (turnId: string) => Promise<Record<string, unknown>>,
): Promise<void> {
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
  let settled = true;
  try {
    outcome = await turn.outcome;
  } catch (err) {
    settled = false;
    // Headers are out, so even a late refusal (a 409 that lost the race in AgentService.accepted)
    // is told in `done`.
    if (!(err instanceof AppError)) services.logger.error({ err }, 'agent turn failed');
    const error = err instanceof AppError ? { code: err.code, message: err.message } : { code: CODE.internal_error, message: 'The turn failed unexpectedly' };
    outcome = { outcome: 'failed', error, tools_called: [], telemetry: { tokens_in: 0, tokens_out: 0, wall_ms: 0, cost_usd: 0 } };
  }
  await publish(services.sql, channel, { event: 'end', data: null }).catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([ended, new Promise((resolve) => (timer = setTimeout(resolve, 5000)))]);
  clearTimeout(timer);
  await unsubscribe();
  const more = moreDone ? await moreDone(turnId).catch(() => ({})) : {};
  const decided = turn.decided && settled ? await decidedDone(turn, outcome, services) : undefined;
  if (decided) {
    if (decided.pending_action) write('gate_pending', decided.pending_action);
    write('done', decided);
  } else {
    if (outcome.outcome === 'gate_pending') write('gate_pending', outcome.pending_action);
    write('done', { ...doneData(outcome), ...more });
  }
  res.end();
}
