import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  proxyActivities,
  setHandler,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import type { AgentActivities } from '../activities/index.js';
import { agentDecisionUpdate, agentMessageUpdate, agentStateQuery } from './agent.updates.js';
import {
  AGENT_GATED_TOOLS,
  type AgentPendingAction,
  type AgentSessionInput,
  type AgentTelemetry,
  type AgentToolCall,
  type AgentToolCalled,
  type AgentTurnOutcome,
} from './defs.js';

const store = proxyActivities<AgentActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20, nonRetryableErrorTypes: ['not_found'] },
});

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
    nonRetryableErrorTypes: ['provider_error', 'provider_auth_failed', 'not_found'],
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
}

function failureOf(err: unknown): { code: string; message: string } {
  let cause: unknown = err;
  while (cause instanceof ActivityFailure) cause = cause.cause ?? cause;
  if (cause instanceof ApplicationFailure) {
    // Retries of 429/5xx exhausted: report it as the provider error it is.
    const code = cause.type === 'provider_unavailable' ? 'provider_error' : (cause.type ?? 'provider_error');
    return { code, message: cause.message };
  }
  if (err instanceof ActivityFailure && err.cause?.name === 'TimeoutFailure') return { code: 'provider_error', message: 'The model did not answer in time' };
  return { code: 'provider_error', message: err instanceof Error ? err.message : String(err) };
}

const refuse = (type: string, message: string) => ApplicationFailure.create({ type, message, nonRetryable: true });

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

  async function drive(turn: Turn, streamChannel: string | undefined, decision?: { actionId: string; approved: boolean; note?: string; decidedBy: number }): Promise<AgentTurnOutcome> {
    const started = Date.now();
    const spent = () => ({ ...turn.telemetry, wall_ms: turn.telemetry.wall_ms + (Date.now() - started) });
    const ids = { sessionId: input.sessionId, turnId: turn.turnId };
    for (;;) {
      const call = turn.queue[0];
      if (call) {
        const gated = AGENT_GATED_TOOLS.includes(call.name);
        if (gated && !decision) {
          const action = await store.agentOpenGate({ ...ids, actionId: uuid4(), call });
          pending = action;
          suspended = turn;
          turn.telemetry = spent();
          return { outcome: 'gate_pending', pending_action: action, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
        }
        const stepKey = `tool:${turn.turnId}:${turn.modelCalls}:${call.id}`;
        const result = await store.agentRunTool({ ...ids, stepKey, call, ...(gated && decision ? { decision } : {}), ...(streamChannel ? { streamChannel } : {}) });
        decision = undefined;
        turn.queue.shift();
        turn.toolsCalled.push({ name: call.name, args: call.args, result_summary: result.summary });
        continue;
      }
      if (turn.modelCalls >= input.maxModelCalls) {
        const message = `I stopped here: this turn reached its limit of ${input.maxModelCalls} model calls. Send another message to let me continue.`;
        turn.telemetry = spent();
        await store.agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry, closingMessage: message });
        return { outcome: 'answered', assistant_message: message, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
      }
      let reply;
      try {
        reply = await model.agentCallModel({ ...ids, step: turn.modelCalls, ...(streamChannel ? { streamChannel } : {}) });
      } catch (err) {
        const error = failureOf(err);
        turn.telemetry = spent();
        await store.agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry, error });
        return { outcome: 'failed', error, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
      }
      turn.modelCalls++;
      turn.telemetry.tokens_in += reply.tokensIn;
      turn.telemetry.tokens_out += reply.tokensOut;
      turn.telemetry.cost_usd = Math.round((turn.telemetry.cost_usd + reply.costUsd) * 1e6) / 1e6;
      if (reply.toolCalls.length) {
        turn.queue = [...reply.toolCalls];
        continue;
      }
      turn.telemetry = spent();
      await store.agentFinishTurn({ ...ids, step: turn.modelCalls, telemetry: turn.telemetry });
      return { outcome: 'answered', assistant_message: reply.text, tools_called: turn.toolsCalled, telemetry: turn.telemetry };
    }
  }

  setHandler(
    agentMessageUpdate,
    async (args) => {
      busy = true;
      handled++;
      try {
        await store.agentBeginTurn({ sessionId: input.sessionId, turnId: args.turnId, content: args.content });
        const turn: Turn = { turnId: args.turnId, modelCalls: 0, queue: [], toolsCalled: [], telemetry: { tokens_in: 0, tokens_out: 0, wall_ms: 0, cost_usd: 0 } };
        return await drive(turn, args.streamChannel);
      } finally {
        busy = false;
      }
    },
    {
      validator: (_args) => {
        if (busy) throw refuse('turn_in_progress', 'A turn of this session is still running; wait for its outcome');
        if (pending) throw refuse('gate_pending', 'This session waits for a decision on its pending action');
      },
    },
  );

  setHandler(
    agentDecisionUpdate,
    async (args) => {
      busy = true;
      handled++;
      const turn = suspended!;
      pending = undefined;
      suspended = undefined;
      try {
        return await drive(turn, args.streamChannel, { actionId: args.actionId, approved: args.approved, decidedBy: args.decidedBy, ...(args.note !== undefined ? { note: args.note } : {}) });
      } finally {
        busy = false;
      }
    },
    {
      validator: (args) => {
        if (busy) throw refuse('turn_in_progress', 'A turn of this session is still running; wait for its outcome');
        if (!pending || !suspended || pending.action_id !== args.actionId) throw refuse('action_not_pending', 'This action is not waiting for a decision');
      },
    },
  );

  setHandler(agentStateQuery, () => ({ busy, pending: pending ?? null }));

  // A session lives as long as its user keeps talking; it continues as new between turns (never
  // while a turn runs or a gate waits, whose state would otherwise have to travel along).
  await condition(() => !busy && !pending && (handled >= input.updatesPerRun || workflowInfo().continueAsNewSuggested));
  await condition(allHandlersFinished);
  await continueAsNew<typeof agentSession>(input);
}
