import { WorkflowUpdateFailedError, type WorkflowUpdateHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { AppError, conflict } from '../platform/errors.js';
import type { Metrics } from '../platform/metrics.js';
import { AGENT_ACTION_NOT_APPROVED, AGENT_REJECTION, AGENT_REJECTIONS, type AgentTurnOutcome } from '../../workflows/defs.js';

/** A turn the workflow accepted; `outcome` settles when the turn reaches its next outcome. */
export interface AcceptedTurn {
  outcome: Promise<AgentTurnOutcome>;
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

/** The session workflow's validator refusals as 409s; anything else unchanged. */
function refusal(err: unknown): unknown {
  const cause = err instanceof WorkflowUpdateFailedError ? err.cause : undefined;
  if (cause instanceof ApplicationFailure && (AGENT_REJECTIONS as readonly string[]).includes(cause.type ?? '')) {
    if (cause.type === AGENT_REJECTION.actionNotPending) return conflict('action_already_decided', cause.message);
    return conflict(cause.type!, cause.message);
  }
  return err;
}

/**
 * The response data of a turn outcome, as SPEC section 2 shapes it. A provider failure is a 502;
 * a gated call whose stored action did not allow it (the tool activity refused) a 409.
 */
export function outcomeData(outcome: AgentTurnOutcome) {
  if (outcome.outcome === 'answered') {
    return { outcome: 'answered' as const, assistant_message: outcome.assistant_message, tools_called: outcome.tools_called, telemetry: outcome.telemetry };
  }
  if (outcome.outcome === 'gate_pending') return { outcome: 'gate_pending' as const, pending_action: outcome.pending_action };
  const status =
    outcome.error.code === 'not_found' ? 404 : outcome.error.code === 'forbidden' ? 403 : outcome.error.code === AGENT_ACTION_NOT_APPROVED ? 409 : 502;
  throw new AppError(status, outcome.error.code, outcome.error.message, { tools_called: outcome.tools_called, telemetry: outcome.telemetry });
}

/** Counts the outcome of a turn segment when it arrives (svc_agent_turns_total). */
export function countOutcome(turn: AcceptedTurn, metrics: Pick<Metrics, 'agentTurns'> | undefined): AcceptedTurn {
  turn.outcome.then(
    (outcome) => metrics?.agentTurns.inc({ outcome: outcome.outcome }),
    () => metrics?.agentTurns.inc({ outcome: 'failed' }),
  );
  return turn;
}
