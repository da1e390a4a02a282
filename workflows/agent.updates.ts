import { defineQuery, defineUpdate } from '@temporalio/workflow';
import type { AgentDecisionArgs, AgentMessageArgs, AgentPendingAction, AgentTurnOutcome } from './defs.js';

// Declared once here and shared by the session workflow and the API (which imports only this
// file and defs.ts, never the workflow implementation).

/** A user message: the update completes with the turn's outcome. */
export const agentMessageUpdate = defineUpdate<AgentTurnOutcome, [AgentMessageArgs]>('agentMessage');
/** Approve or reject the pending action: the update completes with the turn's next outcome. */
export const agentDecisionUpdate = defineUpdate<AgentTurnOutcome, [AgentDecisionArgs]>('agentDecision');
export const agentStateQuery = defineQuery<{ busy: boolean; pending: AgentPendingAction | null }>('agentState');
