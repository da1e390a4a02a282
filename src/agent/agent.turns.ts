import { WorkflowUpdateFailedError, type WorkflowUpdateHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { AppError, conflict } from '../platform/errors.js';
import type { Metrics } from '../platform/metrics.js';
import { Announcements, NOTIFY_PAYLOAD_BYTES, type ListeningHub } from '../platform/announcements.js';
import type { Logger } from '../platform/logger.js';
import {
  AGENT_ACTION_NOT_APPROVED,
  AGENT_REJECTION,
  AGENT_REJECTIONS,
  type AgentModelCallInput,
  type AgentRejection,
  type AgentTurnOutcome,
} from '../../workflows/defs.js';
import { addUsage, withWallTime } from '../../workflows/agent-turn.js';
import { answersWith, isHttpErrorCode, CODE } from '../../workflows/error-codes.js';

/** A turn the workflow accepted; `outcome` settles when the turn reaches its next outcome. */
export interface AcceptedTurn {
  outcome: Promise<AgentTurnOutcome>;
  /**
   * Set when the caller decided an action of someone else's session: what they are answered
   * instead of the outcome (the decision, not the rest of the owner's turn; agent.gate.ts).
   */
  decided?: (outcome: AgentTurnOutcome) => Promise<DecidedData>;
}

/** The answer to a decider who is not the session's owner (`AgentTurnDecided`). */
export interface DecidedData {
  outcome: 'decided';
  action: Record<string, unknown>;
  turn: AgentTurnOutcome['outcome'];
  pending_action?: Extract<AgentTurnOutcome, { outcome: 'gate_pending' }>['pending_action'];
}

/**
 * Starts an update and waits until the workflow accepted it. A refusal by the update's validator
 * comes back with the start call itself, so the outcome promise settles at once; the short race
 * below catches that before a caller commits to an answer (an event stream's headers, a stored
 * decision). A refusal is translated into the API's 409 codes.
 */
export async function acceptedTurn(start: () => Promise<WorkflowUpdateHandle<AgentTurnOutcome>>): Promise<AcceptedTurn> {
  const handle = await start().catch((err: unknown) => {
    throw refusal(err);
  });
  const outcome = handle.result().catch((err: unknown) => {
    throw refusal(err);
  });
  outcome.catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  const early = await Promise.race([
    outcome.then(
      () => 'settled',
      () => 'refused',
    ),
    new Promise((resolve) => (timer = setTimeout(() => resolve('running'), 10))),
  ]);
  clearTimeout(timer);
  if (early === 'refused') await outcome;
  return { outcome };
}

/**
 * Runs an update to its outcome in one call (a caller that streams nothing needs no word of its
 * acceptance): the server answers once the turn's outcome is in the history, instead of an
 * acceptance and a second call that waits for the outcome. Refusals as acceptedTurn's.
 */
export async function completedTurn(execute: () => Promise<AgentTurnOutcome>): Promise<AcceptedTurn> {
  const outcome = await execute().catch((err: unknown) => {
    throw refusal(err);
  });
  return { outcome: Promise.resolve(outcome) };
}

/** The session workflow's validator refusals as 409s; anything else unchanged. */
function refusal(err: unknown): unknown {
  const cause = err instanceof WorkflowUpdateFailedError ? err.cause : undefined;
  if (cause instanceof ApplicationFailure && (AGENT_REJECTIONS as readonly string[]).includes(cause.type ?? '')) {
    const type = cause.type as AgentRejection;
    return conflict(type === AGENT_REJECTION.actionNotPending ? CODE.action_already_decided : type, cause.message);
  }
  return err;
}

/**
 * The response data of a turn outcome: `{outcome: 'answered', assistant_message, tools_called,
 * telemetry}` or `{outcome: 'gate_pending', pending_action}`; a failed turn is an error answer. A
 * provider failure is a 502 whatever its code (an egress refusal of the provider's address too);
 * a gated call whose stored action did not allow it (the tool activity refused) a 409; a session
 * or connection gone, or no longer shared, its own 404 or 403.
 */
export function outcomeData(outcome: AgentTurnOutcome) {
  if (outcome.outcome === 'answered') {
    return { outcome: 'answered' as const, assistant_message: outcome.assistant_message, tools_called: outcome.tools_called, telemetry: outcome.telemetry };
  }
  if (outcome.outcome === 'gate_pending') return { outcome: 'gate_pending' as const, pending_action: outcome.pending_action };
  return failure(outcome);
}

/** A failed turn as the error it answers. */
export function failure(outcome: Extract<AgentTurnOutcome, { outcome: 'failed' }>): never {
  const { code, message } = outcome.error;
  const data = { tools_called: outcome.tools_called, telemetry: outcome.telemetry };
  if (code === CODE.not_found || code === CODE.forbidden || code === AGENT_ACTION_NOT_APPROVED) throw new AppError(code, message, data);
  // Anything else failed the model call: a code the catalogue answers 502, or a provider_error.
  throw new AppError(isHttpErrorCode(code) && answersWith(code, 502) ? code : CODE.provider_error, message, data, undefined, 502);
}

/** Counts the outcome of a turn segment when it arrives (svc_agent_turns_total). */
export function countOutcome(turn: AcceptedTurn, metrics: Pick<Metrics, 'agentTurns'> | undefined): AcceptedTurn {
  turn.outcome.then(
    (outcome) => metrics?.agentTurns.inc({ outcome: outcome.outcome }),
    () => metrics?.agentTurns.inc({ outcome: 'failed' }),
  );
  return turn;
}

/**
 * The channel a message turn's model call announces its outcome on once the answer that ends the
 * turn is stored (AgentModelCallInput.announce): `{"turn_id", "outcome"}`. The API waiting for that
 * turn's outcome without a stream answers from it instead of waiting for the session workflow's
 * next task to complete the update. The stored answer is the turn's: a retried call finds it and
 * answers the same, so the workflow's outcome says what the announcement said.
 */
export const TURN_ANSWERED_CHANNEL = 'svc_agent_turn_answered';

/** The outcome of a turn its model call ended, as the workflow will answer it (its wall time up to `now`). */
export function answeredOutcome(
  announce: NonNullable<AgentModelCallInput['announce']>,
  reply: { text: string; tokensIn: number; tokensOut: number; costUsd: number },
  now: number,
): AgentTurnOutcome {
  const telemetry = { ...announce.telemetry };
  addUsage(telemetry, reply);
  return {
    outcome: 'answered',
    assistant_message: reply.text,
    tools_called: announce.toolsCalled,
    telemetry: withWallTime(telemetry, announce.startedAt, now),
  };
}

/** The announcement of a turn's outcome, sent with the statement that stores its answer; none for an outcome too large to announce. */
export function turnAnnouncement(turnId: string, outcome: AgentTurnOutcome): { channel: string; payload: string } | undefined {
  const payload = JSON.stringify({ turn_id: turnId, outcome });
  return Buffer.byteLength(payload) > NOTIFY_PAYLOAD_BYTES ? undefined : { channel: TURN_ANSWERED_CHANNEL, payload };
}

/** The answered turns announced on TURN_ANSWERED_CHANNEL, by turn id. */
export function turnAnsweredAnnouncements(hub: ListeningHub, logger: Logger): Announcements<AgentTurnOutcome> {
  return new Announcements<AgentTurnOutcome>(
    hub,
    TURN_ANSWERED_CHANNEL,
    (payload) => {
      try {
        const { turn_id: turnId, outcome } = JSON.parse(payload) as { turn_id?: unknown; outcome?: AgentTurnOutcome };
        return typeof turnId === 'string' && outcome?.outcome === 'answered' ? { key: turnId, value: outcome } : undefined;
      } catch {
        return undefined;
      }
    },
    logger,
  );
}
