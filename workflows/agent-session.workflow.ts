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
import { CODE } from './error-codes.js';
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
  type AgentDecisionArgs,
  type AgentMessageArgs,
  type AgentPendingAction,
  type AgentRejection,
  type AgentSessionInput,
  type AgentTelemetry,
  type AgentToolCall,
  type AgentTurnOutcome,
} from './defs.js';
import {
  addUsage,
  decisionOf,
  modelCallLimitMessage,
  newTurn,
  remainingWatch,
  toolCalled,
  watchFrom,
  withWallTime,
  type Turn,
  type WatchedGate,
} from './agent-turn.js';

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

/** The session's state between updates; the update handlers, the drive and the watch share it. */
interface Session {
  input: AgentSessionInput;
  busy: boolean;
  pending: AgentPendingAction | undefined;
  suspended: Turn | undefined;
  handled: number;
  /** The pending gate's deadline, while its timer runs (gates opened before the patch have none). */
  watched: WatchedGate | undefined;
  /** The action whose deadline passed and whose expiry is being stored: decisions on it are refused. */
  expiring: string | undefined;
}

/** A turn being driven: its session, its ids, the stream it reports to, and its wall time so far. */
interface Drive {
  session: Session;
  turn: Turn;
  ids: { sessionId: string; turnId: string };
  streamChannel: string | undefined;
  /** When this drive began (workflow time). */
  started: number;
  /** The turn's telemetry with this drive's wall time added. */
  spent: () => AgentTelemetry;
  /** A caller waits for this message turn's outcome without a stream: its answer is announced (AgentModelCallInput.announce). */
  announce: boolean;
}

/**
 * Runs a turn until it is answered, fails, or waits at a gate: the queued tool calls first, then
 * the model, whose tool calls are queued in turn. `decision` is the decision on the first queued
 * call (a gated one), `gate` the gate it closed.
 */
async function drive(
  session: Session,
  turn: Turn,
  streamChannel: string | undefined,
  decision?: AgentDecision,
  gate?: OpenGate,
  announce = false,
): Promise<AgentTurnOutcome> {
  const started = Date.now();
  const spent = () => withWallTime(turn.telemetry, started, Date.now());
  const d: Drive = { session, turn, ids: { sessionId: session.input.sessionId, turnId: turn.turnId }, streamChannel, started, spent, announce };
  for (;;) {
    const call = turn.queue[0];
    if (call) {
      const outcome = await runQueuedTool(d, call, decision, gate);
      if (outcome) return outcome;
      decision = undefined;
      continue;
    }
    if (turn.modelCalls >= session.input.maxModelCalls) return stopAtLimit(d);
    const outcome = await askModel(d);
    if (outcome) return outcome;
  }
}

/** Runs the first queued tool call, or opens its gate; an outcome when the turn stops here. */
async function runQueuedTool(
  d: Drive,
  call: AgentToolCall,
  decision: AgentDecision | undefined,
  gate: OpenGate | undefined,
): Promise<AgentTurnOutcome | undefined> {
  const { turn, ids, streamChannel } = d;
  const gated = isGatedTool(call.name);
  if (gated && !decision) return openGate(d, call);
  const stepKey = `tool:${turn.turnId}:${turn.modelCalls}:${call.id}`;
  let result;
  try {
    result = await store.agentRunTool({ ...ids, stepKey, call, ...(gated && decision ? { decision } : {}), ...(streamChannel ? { streamChannel } : {}) });
  } catch (err) {
    return toolRefused(d, err, gate);
  }
  turn.queue.shift();
  turn.toolsCalled.push(toolCalled(call, result));
  return undefined;
}

/** Opens the gate of a gated call: the turn waits for a decision (until its deadline, if it has one). */
async function openGate(d: Drive, call: AgentToolCall): Promise<AgentTurnOutcome> {
  // The marker sits just before the gate's activity, so a history of older code (an
  // activity here, no marker) replays as it ran: no deadline, no timer. Remove with
  // deprecatePatch once no session can still hold a run of that code (every session
  // continues as new after SVC_AGENT_UPDATES_PER_RUN updates).
  const expiry = patched(AGENT_GATE_EXPIRY_PATCH);
  const { ttl_ms: ttlMs, ...action } = await store.agentOpenGate({ ...d.ids, actionId: uuid4(), call, ...(expiry ? { expiry } : {}) });
  return suspend(d, action, expiry && ttlMs !== undefined ? watchFrom(action.action_id, ttlMs, Date.now()) : undefined);
}

/** Keeps the turn at its gate until a decision (or the deadline) comes. */
function suspend(d: Drive, action: AgentPendingAction, watched: WatchedGate | undefined): AgentTurnOutcome {
  d.session.pending = action;
  d.session.suspended = d.turn;
  d.session.watched = watched;
  d.turn.telemetry = d.spent();
  return { outcome: 'gate_pending', pending_action: action, tools_called: d.turn.toolsCalled, telemetry: d.turn.telemetry };
}

/** A tool activity failed: the turn waits at its gate again, or fails. */
async function toolRefused(d: Drive, err: unknown, gate: OpenGate | undefined): Promise<AgentTurnOutcome> {
  // The activity refused a gated call whose stored action does not allow it. Older code
  // never saw this failure type, so this branch adds no command to any recorded history.
  if (failureType(err) !== AGENT_ACTION_NOT_APPROVED) throw err;
  // The decision came without being stored (the API's claim was rolled back after Temporal
  // admitted the update): the gate opens again, with what is left of its deadline.
  if (gate && decisionNotStored(err) && patched(AGENT_DECISION_NOT_STORED_PATCH)) return suspend(d, gate.action, remainingWatch(gate.watched, Date.now()));
  return failTurn(d, failureOf(err));
}

/** Ends the turn as failed, with its error stored. */
async function failTurn(d: Drive, error: { code: string; message: string }): Promise<AgentTurnOutcome> {
  const { turn, ids } = d;
  turn.telemetry = d.spent();
  await bookkeeping().agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry, error });
  return { outcome: 'failed', error, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
}

/** Ends a turn that reached its limit of model calls with a message that says so. */
async function stopAtLimit(d: Drive): Promise<AgentTurnOutcome> {
  const { turn, ids } = d;
  const message = modelCallLimitMessage(d.session.input.maxModelCalls);
  turn.telemetry = d.spent();
  await bookkeeping().agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry, closingMessage: message });
  return { outcome: 'answered', assistant_message: message, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
}

/** Calls the model: its tool calls are queued (no outcome yet), or its answer ends the turn. */
async function askModel(d: Drive): Promise<AgentTurnOutcome | undefined> {
  const { turn, ids, streamChannel } = d;
  let reply;
  try {
    reply = await model.agentCallModel({
      ...ids,
      step: turn.modelCalls,
      ...(streamChannel ? { streamChannel } : {}),
      ...(turn.userMessage !== undefined ? { userMessage: turn.userMessage } : {}),
      // A lean turn's answer ends it with nothing more to store: what the activity announces is its outcome.
      ...(d.announce && turn.lean ? { announce: { toolsCalled: turn.toolsCalled, telemetry: turn.telemetry, startedAt: d.started } } : {}),
    });
  } catch (err) {
    return failTurn(d, failureOf(err));
  }
  turn.modelCalls++;
  turn.userMessage = undefined;
  addUsage(turn.telemetry, reply);
  if (reply.toolCalls.length) {
    turn.queue = [...reply.toolCalls];
    return undefined;
  }
  turn.telemetry = d.spent();
  // The answer is stored with its call; the closing step of earlier turns wrote nothing more.
  if (!turn.lean) await bookkeeping().agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry });
  return { outcome: 'answered', assistant_message: reply.text, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
}

/** A user's message: a new turn, driven until its outcome. */
async function onMessage(session: Session, args: AgentMessageArgs): Promise<AgentTurnOutcome> {
  session.busy = true;
  session.handled++;
  try {
    // A turn's first model call stores the message: the update goes straight to the model.
    const lean = patched(AGENT_LEAN_TURN_PATCH);
    if (!lean) await bookkeeping().agentBeginTurn({ sessionId: session.input.sessionId, turnId: args.turnId, content: args.content });
    return await drive(session, newTurn(args.turnId, args.content, lean), args.streamChannel, undefined, undefined, !args.streamChannel);
  } finally {
    session.busy = false;
  }
}

/** A decision on the pending action: the suspended turn goes on with it. */
async function onDecision(session: Session, args: AgentDecisionArgs): Promise<AgentTurnOutcome> {
  session.busy = true;
  session.handled++;
  const turn = session.suspended!;
  const gate: OpenGate = { action: session.pending!, watched: session.watched };
  session.pending = undefined;
  session.suspended = undefined;
  session.watched = undefined;
  try {
    return await drive(session, turn, args.streamChannel, decisionOf(args), gate);
  } finally {
    session.busy = false;
  }
}

/** The updates, refused before they are accepted when the session cannot take them now, and the state query. */
function handleUpdates(session: Session): void {
  setHandler(agentMessageUpdate, (args) => onMessage(session, args), {
    validator: (_args) => {
      if (session.busy) throw refuse(AGENT_REJECTION.turnInProgress, 'A turn of this session is still running; wait for its outcome');
      if (session.pending) throw refuse(AGENT_REJECTION.gatePending, 'This session waits for a decision on its pending action');
    },
  });
  setHandler(agentDecisionUpdate, (args) => onDecision(session, args), {
    validator: (args) => {
      if (session.busy) throw refuse(AGENT_REJECTION.turnInProgress, 'A turn of this session is still running; wait for its outcome');
      if (session.expiring === args.actionId) throw refuse(AGENT_REJECTION.actionExpired, 'This action expired before it was decided');
      if (!session.pending || !session.suspended || session.pending.action_id !== args.actionId)
        throw refuse(AGENT_REJECTION.actionNotPending, 'This action is not waiting for a decision');
    },
  });
  setHandler(agentStateQuery, () => ({ busy: session.busy, pending: session.pending ?? null }));
}

/**
 * Waits for a decision on the watched gate until its deadline (a durable timer: a worker restart
 * does not lose it). When none came, the action is stored as expired and the turn goes on with
 * the model, which reads the expiry as the tool's result; no caller waits for that outcome, so
 * it is in the session history (and the next turn's `done` names the expired action).
 */
async function watch(session: Session, gate: WatchedGate): Promise<void> {
  const stillPending = () => session.pending?.action_id === gate.actionId;
  await condition(() => !stillPending(), gate.ttlMs);
  if (session.watched === gate) session.watched = undefined;
  if (!stillPending() || session.busy) return;
  if (!(await storeExpiry(session, gate, stillPending))) return;
  const turn = session.suspended!;
  session.pending = undefined;
  session.suspended = undefined;
  session.busy = true;
  try {
    await drive(session, turn, undefined, { actionId: gate.actionId, approved: false, expired: true });
  } catch (err) {
    // The turn's failure is the session's to report, not a reason to end the session workflow.
    log.warn('An agent turn resumed after an expiry failed', { actionId: gate.actionId, error: String(err) });
  } finally {
    session.busy = false;
  }
}

/** Stores the expiry of the watched gate's action; whether it expired and is still pending here. */
async function storeExpiry(session: Session, gate: WatchedGate, stillPending: () => boolean): Promise<boolean> {
  session.expiring = gate.actionId;
  let status;
  try {
    ({ status } = await store.agentExpireAction({ sessionId: session.input.sessionId, actionId: gate.actionId }));
  } catch (err) {
    // The API refuses decisions past the deadline, so an expiry that could not be stored (the
    // database down through every retry) is tried again a minute later, until it is; sessions
    // from before the patch kept waiting for a decision that could never come.
    const retry = patched(AGENT_EXPIRY_RETRY_PATCH);
    log.warn(`The expiry of an agent action could not be stored; ${retry ? 'it is tried again in a minute' : 'it waits for a decision instead'}`, {
      actionId: gate.actionId,
      error: String(err),
    });
    const retryMs = session.input.expiryRetryMs ?? EXPIRY_RETRY_MS;
    if (retry && stillPending()) session.watched = watchFrom(gate.actionId, retryMs, Date.now());
    return false;
  } finally {
    session.expiring = undefined;
  }
  // A decision stored just before the deadline wins; its update is on its way.
  return status === 'expired' && stillPending();
}

/**
 * One chat session. A message and a decision are Temporal updates (not signal + query) because the
 * caller needs the turn's outcome as the answer, and an update's validator lets the workflow itself
 * refuse a second concurrent turn without writing anything to history. The conversation lives in
 * PostgreSQL (written by idempotent activities), so the workflow state is small: the turn at hand.
 */
export async function agentSession(input: AgentSessionInput): Promise<void> {
  const session: Session = { input, busy: false, pending: undefined, suspended: undefined, handled: 0, watched: undefined, expiring: undefined };
  handleUpdates(session);

  // A session lives as long as its user keeps talking; it continues as new between turns (never
  // while a turn runs or a gate waits, whose state would otherwise have to travel along). Between
  // turns it watches the deadline of a pending gate.
  const mayContinueAsNew = () => !session.busy && !session.pending && (session.handled >= input.updatesPerRun || workflowInfo().continueAsNewSuggested);
  for (;;) {
    await condition(() => session.watched !== undefined || mayContinueAsNew());
    if (!session.watched) break;
    await watch(session, session.watched);
  }
  await condition(allHandlersFinished);
  await continueAsNew<typeof agentSession>(input);
}
