import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import type { AgentActivities } from '../activities/index.js';
import { agentDecisionUpdate, agentMessageUpdate, agentStateQuery } from './agent.updates.js';
import {
  AGENT_ACTION_NOT_APPROVED,
  AGENT_DECISION_NOT_STORED_PATCH,
  AGENT_GATE_EXPIRY_PATCH,
  AGENT_EXPIRY_RETRY_PATCH,
  AGENT_LEAN_TURN_PATCH,
  AGENT_LOCAL_BOOKKEEPING_PATCH,
  AGENT_REJECTION,
  isGatedTool,
  type AgentDecision,
  type AgentPendingAction,
  type AgentRejection,
  type AgentSessionInput,
  type AgentTelemetry,
  type AgentToolCall,
  type AgentToolCalled,
  type AgentTurnOutcome,
} from './defs.js';
import { CODE } from './error-codes.js';

const store = proxyActivities<AgentActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20, nonRetryableErrorTypes: [CODE.not_found] },
});

// A turn's bookkeeping (store the user's message, close the turn) is short and idempotent: as
// local activities it runs inside the workflow task instead of a dispatch through the server each.
const localStore = proxyLocalActivities<AgentActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20, nonRetryableErrorTypes: [CODE.not_found] },
});
/** Sessions started before AGENT_LOCAL_BOOKKEEPING_PATCH keep regular activities until they continue as new. */
const bookkeeping = () => (patched(AGENT_LOCAL_BOOKKEEPING_PATCH) ? localStore : store);

// 429 and 5xx come back as retryable `provider_unavailable` failures, so Temporal's backoff is the
// retry loop; a refused credential, an unreachable host or a malformed answer fail at once.
const model = proxyActivities<AgentActivities>({
  startToCloseTimeout: '5m',
  heartbeatTimeout: '5s',
  retry: {
    initialInterval: '1s',
    backoffCoefficient: 2,
    maximumInterval: '30s',
    maximumAttempts: 4,
    nonRetryableErrorTypes: [CODE.provider_error, CODE.provider_auth_failed, CODE.not_found],
  },
});

/** A turn in progress; between a gate and its decision it is kept here. */
interface Turn {
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

function failureOf(err: unknown): { code: string; message: string } {
  let cause: unknown = err;
  while (cause instanceof ActivityFailure) cause = cause.cause ?? cause;
  if (cause instanceof ApplicationFailure) {
    // Retries of 429/5xx exhausted: report it as the provider error it is.
    const code = cause.type === CODE.provider_unavailable ? CODE.provider_error : (cause.type ?? CODE.provider_error);
    return { code, message: cause.message };
  }
  if (err instanceof ActivityFailure && err.cause?.name === 'TimeoutFailure') return { code: CODE.provider_error, message: 'The model did not answer in time' };
  return { code: CODE.provider_error, message: err instanceof Error ? err.message : String(err) };
}

const refuse = (type: AgentRejection, message: string) => ApplicationFailure.create({ type, message, nonRetryable: true });

/** The type of an activity's ApplicationFailure, if that is what `err` is. */
function failureType(err: unknown): string | undefined {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof ApplicationFailure ? (cause.type ?? undefined) : undefined;
}

/** How long after a failed attempt to store an expiry the workflow tries again. */
const EXPIRY_RETRY_MS = 60_000;

/** A gate a decision closed, kept until the decision is known to be stored. */
interface OpenGate {
  action: AgentPendingAction;
  /** Its deadline's watch, if it has one (gates opened before the expiry patch have none). */
  watched: WatchedGate | undefined;
}

/** Whether the tool activity refused because the decision it was given is not stored. */
function decisionNotStored(err: unknown): boolean {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof ApplicationFailure && (cause.details?.[0] as { stored?: string } | undefined)?.stored === 'pending';
}

/** A gate whose deadline the workflow's main loop watches with a durable timer. */
interface WatchedGate {
  actionId: string;
  ttlMs: number;
  /** Workflow time of the deadline, to watch again what is left of it. */
  deadline: number;
}

/**
 * One chat session. A message and a decision are Temporal updates (not signal + query) because the
 * caller needs the turn's outcome as the answer, and an update's validator lets the workflow itself
 * refuse a second concurrent turn without writing anything to history. The conversation lives in
 * PostgreSQL (written by idempotent activities), so the workflow state is small: the turn at hand.
 */
export async function agentSession(input: AgentSessionInput): Promise<void> {
  let busy = false;
  let pending: AgentPendingAction | undefined;
  let suspended: Turn | undefined;
  let handled = 0;
  /** The pending gate's deadline, while its timer runs (gates opened before the patch have none). */
  let watched: WatchedGate | undefined;
  /** The action whose deadline passed and whose expiry is being stored: decisions on it are refused. */
  let expiring: string | undefined;

  async function drive(turn: Turn, streamChannel: string | undefined, decision?: AgentDecision, gate?: OpenGate): Promise<AgentTurnOutcome> {
    const started = Date.now();
    const spent = () => ({ ...turn.telemetry, wall_ms: turn.telemetry.wall_ms + (Date.now() - started) });
    const ids = { sessionId: input.sessionId, turnId: turn.turnId };
    for (;;) {
      const call = turn.queue[0];
      if (call) {
        const gated = isGatedTool(call.name);
        if (gated && !decision) {
          // The marker sits just before the gate's activity, so a history of older code (an
          // activity here, no marker) replays as it ran: no deadline, no timer. Remove with
          // deprecatePatch once no session can still hold a run of that code (every session
          // continues as new after SVC_AGENT_UPDATES_PER_RUN updates).
          const expiry = patched(AGENT_GATE_EXPIRY_PATCH);
          const { ttl_ms: ttlMs, ...action } = await store.agentOpenGate({ ...ids, actionId: uuid4(), call, ...(expiry ? { expiry } : {}) });
          pending = action;
          suspended = turn;
          watched = expiry && ttlMs !== undefined ? { actionId: action.action_id, ttlMs, deadline: Date.now() + ttlMs } : undefined;
          turn.telemetry = spent();
          return { outcome: 'gate_pending', pending_action: action, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
        }
        const stepKey = `tool:${turn.turnId}:${turn.modelCalls}:${call.id}`;
        let result;
        try {
          result = await store.agentRunTool({ ...ids, stepKey, call, ...(gated && decision ? { decision } : {}), ...(streamChannel ? { streamChannel } : {}) });
        } catch (err) {
          // The activity refused a gated call whose stored action does not allow it. Older code
          // never saw this failure type, so this branch adds no command to any recorded history.
          if (failureType(err) !== AGENT_ACTION_NOT_APPROVED) throw err;
          // The decision came without being stored (the API's claim was rolled back after Temporal
          // admitted the update): the gate opens again, with what is left of its deadline.
          if (gate && decisionNotStored(err) && patched(AGENT_DECISION_NOT_STORED_PATCH)) {
            pending = gate.action;
            suspended = turn;
            watched = gate.watched && { ...gate.watched, ttlMs: Math.max(0, gate.watched.deadline - Date.now()) };
            turn.telemetry = spent();
            return { outcome: 'gate_pending', pending_action: gate.action, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
          }
          const error = failureOf(err);
          turn.telemetry = spent();
          await bookkeeping().agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry, error });
          return { outcome: 'failed', error, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
        }
        decision = undefined;
        turn.queue.shift();
        turn.toolsCalled.push({ name: call.name, args: result.args ?? call.args, result_summary: result.summary });
        continue;
      }
      if (turn.modelCalls >= input.maxModelCalls) {
        const message = `I stopped here: this turn reached its limit of ${input.maxModelCalls} model calls. Send another message to let me continue.`;
        turn.telemetry = spent();
        await bookkeeping().agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry, closingMessage: message });
        return { outcome: 'answered', assistant_message: message, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
      }
      let reply;
      try {
        reply = await model.agentCallModel({
          ...ids,
          step: turn.modelCalls,
          ...(streamChannel ? { streamChannel } : {}),
          ...(turn.userMessage !== undefined ? { userMessage: turn.userMessage } : {}),
        });
      } catch (err) {
        const error = failureOf(err);
        turn.telemetry = spent();
        await bookkeeping().agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry, error });
        return { outcome: 'failed', error, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
      }
      turn.modelCalls++;
      turn.userMessage = undefined;
      turn.telemetry.tokens_in += reply.tokensIn;
      turn.telemetry.tokens_out += reply.tokensOut;
      turn.telemetry.cost_usd = Math.round((turn.telemetry.cost_usd + reply.costUsd) * 1e6) / 1e6;
      if (reply.toolCalls.length) {
        turn.queue = [...reply.toolCalls];
        continue;
      }
      turn.telemetry = spent();
      // The answer is stored with its call; the closing step of earlier turns wrote nothing more.
      if (!turn.lean) await bookkeeping().agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry });
      return { outcome: 'answered', assistant_message: reply.text, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
    }
  }

  setHandler(
    agentMessageUpdate,
    async (args) => {
      busy = true;
      handled++;
      try {
        // A turn's first model call stores the message: the update goes straight to the model.
        const lean = patched(AGENT_LEAN_TURN_PATCH);
        if (!lean) await bookkeeping().agentBeginTurn({ sessionId: input.sessionId, turnId: args.turnId, content: args.content });
        const turn: Turn = {
          turnId: args.turnId,
          modelCalls: 0,
          queue: [],
          toolsCalled: [],
          telemetry: { tokens_in: 0, tokens_out: 0, wall_ms: 0, cost_usd: 0 },
          ...(lean ? { lean, userMessage: args.content } : {}),
        };
        return await drive(turn, args.streamChannel);
      } finally {
        busy = false;
      }
    },
    {
      validator: (_args) => {
        if (busy) throw refuse(AGENT_REJECTION.turnInProgress, 'A turn of this session is still running; wait for its outcome');
        if (pending) throw refuse(AGENT_REJECTION.gatePending, 'This session waits for a decision on its pending action');
      },
    },
  );

  setHandler(
    agentDecisionUpdate,
    async (args) => {
      busy = true;
      handled++;
      const turn = suspended!;
      const gate: OpenGate = { action: pending!, watched };
      pending = undefined;
      suspended = undefined;
      watched = undefined;
      try {
        return await drive(
          turn,
          args.streamChannel,
          {
            actionId: args.actionId,
            approved: args.approved,
            decidedBy: args.decidedBy,
            ...(args.note !== undefined ? { note: args.note } : {}),
            ...(args.editedArgs ? { editedArgs: args.editedArgs } : {}),
          },
          gate,
        );
      } finally {
        busy = false;
      }
    },
    {
      validator: (args) => {
        if (busy) throw refuse(AGENT_REJECTION.turnInProgress, 'A turn of this session is still running; wait for its outcome');
        if (expiring === args.actionId) throw refuse(AGENT_REJECTION.actionExpired, 'This action expired before it was decided');
        if (!pending || !suspended || pending.action_id !== args.actionId)
          throw refuse(AGENT_REJECTION.actionNotPending, 'This action is not waiting for a decision');
      },
    },
  );

  setHandler(agentStateQuery, () => ({ busy, pending: pending ?? null }));

  /**
   * Waits for a decision on the watched gate until its deadline (a durable timer: a worker restart
   * does not lose it). When none came, the action is stored as expired and the turn goes on with
   * the model, which reads the expiry as the tool's result; no caller waits for that outcome, so
   * it is in the session history (and the next turn's `done` names the expired action).
   */
  async function watch(gate: WatchedGate): Promise<void> {
    const stillPending = () => pending?.action_id === gate.actionId;
    await condition(() => !stillPending(), gate.ttlMs);
    if (watched === gate) watched = undefined;
    if (!stillPending() || busy) return;
    expiring = gate.actionId;
    let status;
    try {
      ({ status } = await store.agentExpireAction({ sessionId: input.sessionId, actionId: gate.actionId }));
    } catch (err) {
      // The API refuses decisions past the deadline, so an expiry that could not be stored (the
      // database down through every retry) is tried again a minute later, until it is; sessions
      // from before the patch kept waiting for a decision that could never come.
      const retry = patched(AGENT_EXPIRY_RETRY_PATCH);
      log.warn(`The expiry of an agent action could not be stored; ${retry ? 'it is tried again in a minute' : 'it waits for a decision instead'}`, {
        actionId: gate.actionId,
        error: String(err),
      });
      const retryMs = input.expiryRetryMs ?? EXPIRY_RETRY_MS;
      if (retry && stillPending()) watched = { actionId: gate.actionId, ttlMs: retryMs, deadline: Date.now() + retryMs };
      return;
    } finally {
      expiring = undefined;
    }
    // A decision stored just before the deadline wins; its update is on its way.
    if (status !== 'expired' || !stillPending()) return;
    const turn = suspended!;
    pending = undefined;
    suspended = undefined;
    busy = true;
    try {
      await drive(turn, undefined, { actionId: gate.actionId, approved: false, expired: true });
    } catch (err) {
      // The turn's failure is the session's to report, not a reason to end the session workflow.
      log.warn('An agent turn resumed after an expiry failed', { actionId: gate.actionId, error: String(err) });
    } finally {
      busy = false;
    }
  }

  // A session lives as long as its user keeps talking; it continues as new between turns (never
  // while a turn runs or a gate waits, whose state would otherwise have to travel along). Between
  // turns it watches the deadline of a pending gate.
  const mayContinueAsNew = () => !busy && !pending && (handled >= input.updatesPerRun || workflowInfo().continueAsNewSuggested);
  for (;;) {
    await condition(() => watched !== undefined || mayContinueAsNew());
    if (!watched) break;
    await watch(watched);
  }
  await condition(allHandlersFinished);
  await continueAsNew<typeof agentSession>(input);
}
