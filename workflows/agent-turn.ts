// The agent session's turn as plain data, and the pure steps on it (no Temporal API, so they are
// unit tested on their own in agent-turn.test.ts). The session workflow issues the commands.
import type { AgentDecision, AgentDecisionArgs, AgentTelemetry, AgentToolCall, AgentToolCalled } from './defs.js';

/** A turn in progress; between a gate and its decision it is kept here. */
export interface Turn {
  turnId: string;
  modelCalls: number;
  /** Tool calls of the last model answer not yet run. */
  queue: AgentToolCall[];
  toolsCalled: AgentToolCalled[];
  telemetry: AgentTelemetry;
  /**
   * Begun under AGENT_LEAN_TURN_PATCH: the first model call stores `userMessage`, and an answer
   * ends the turn without a closing step. Turns begun before the patch keep both steps.
   */
  lean?: boolean;
  /** A lean message turn's message, until its first model call has stored it. */
  userMessage?: string;
}

/** A gate whose deadline the workflow's main loop watches with a durable timer. */
export interface WatchedGate {
  actionId: string;
  ttlMs: number;
  /** Workflow time of the deadline, to watch again what is left of it. */
  deadline: number;
}

/** A new turn for a user's message; a lean turn carries the message to its first model call. */
export function newTurn(turnId: string, content: string, lean: boolean): Turn {
  return {
    turnId,
    modelCalls: 0,
    queue: [],
    toolsCalled: [],
    telemetry: { tokens_in: 0, tokens_out: 0, wall_ms: 0, cost_usd: 0 },
    ...(lean ? { lean, userMessage: content } : {}),
  };
}

/** The decision the tool activity is given, from the decision update's arguments. */
export function decisionOf(args: AgentDecisionArgs): AgentDecision {
  return {
    actionId: args.actionId,
    approved: args.approved,
    decidedBy: args.decidedBy,
    ...(args.note !== undefined ? { note: args.note } : {}),
    ...(args.editedArgs ? { editedArgs: args.editedArgs } : {}),
  };
}

/** The telemetry with the wall time from `started` to `now` added (workflow time). */
export function withWallTime(telemetry: AgentTelemetry, started: number, now: number): AgentTelemetry {
  return { ...telemetry, wall_ms: telemetry.wall_ms + (now - started) };
}

/** Adds a model call's tokens and cost (rounded to a millionth of a dollar) to the telemetry. */
export function addUsage(telemetry: AgentTelemetry, reply: { tokensIn: number; tokensOut: number; costUsd: number }): void {
  telemetry.tokens_in += reply.tokensIn;
  telemetry.tokens_out += reply.tokensOut;
  telemetry.cost_usd = Math.round((telemetry.cost_usd + reply.costUsd) * 1e6) / 1e6;
}

/** What the assistant says when a turn reaches its limit of model calls. */
export function modelCallLimitMessage(maxModelCalls: number): string {
  return `I stopped here: this turn reached its limit of ${maxModelCalls} model calls. Send another message to let me continue.`;
}

/** A gate's deadline watch, starting at `now`. */
export function watchFrom(actionId: string, ttlMs: number, now: number): WatchedGate {
  return { actionId, ttlMs, deadline: now + ttlMs };
}

/** The watch of a gate opened again: what is left of its deadline at `now` (none when it had none). */
export function remainingWatch(watched: WatchedGate | undefined, now: number): WatchedGate | undefined {
  return watched && { ...watched, ttlMs: Math.max(0, watched.deadline - now) };
}

/** A tool call as the turn's outcome lists it: with the arguments it ran with. */
export function toolCalled(call: AgentToolCall, result: { args?: Record<string, unknown>; summary: string }): AgentToolCalled {
  return { name: call.name, args: result.args ?? call.args, result_summary: result.summary };
}
