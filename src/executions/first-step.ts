import type { Config } from '../config.js';
import { nodeRunModes, nodeTypes, shortLocalTypes } from '../nodes/index.js';
import { CLOSE_IN_NODE, LEAN_HISTORY, LOCAL_MARKED_AT_END, REFS_HISTORY, SHORT_LOCAL_NODES, type BeganExecution, type Graph } from '../../workflows/defs.js';

/** The settings a run's first step answers from. */
export type FirstStepSettings = Pick<
  Config,
  'SVC_LOCAL_PURE_NODES' | 'SVC_LOCAL_CALL_MAX_MS' | 'SVC_HISTORY_INLINE_BYTES' | 'SVC_NODE_CONTEXT_INLINE_BYTES' | 'SVC_RUN_MAX_PARALLEL_NODES'
>;

/** What workflow code can read of the first step's answer; earlier code asks for nothing (see LEAN_HISTORY, REFS_HISTORY, SHORT_LOCAL_NODES, CLOSE_IN_NODE, LOCAL_MARKED_AT_END). */
export interface Understands {
  history?: number;
  refs?: number;
  local?: number;
  close?: number;
  marks?: number;
}

/**
 * The answer of a run's first step (beginExecution, or the API when it prepares the run's start):
 * its execution, its graph, and how the run runs its nodes, as much of it as the workflow code
 * asked for (`understands`).
 */
export function firstStepAnswer(
  settings: FirstStepSettings,
  execution: { executionId: number; version: number; graph: Graph },
  understands: Understands,
): BeganExecution {
  const { SVC_LOCAL_PURE_NODES, SVC_LOCAL_CALL_MAX_MS, SVC_HISTORY_INLINE_BYTES, SVC_NODE_CONTEXT_INLINE_BYTES, SVC_RUN_MAX_PARALLEL_NODES } = settings;
  return {
    executionId: execution.executionId,
    version: execution.version,
    graph: execution.graph,
    runModes: nodeRunModes(SVC_LOCAL_PURE_NODES),
    // Still answered for workers on earlier workflow code (a rolling deployment), which read
    // these: they must run every node the way runModes says.
    localPureNodes: SVC_LOCAL_PURE_NODES,
    pureTypes: [...nodeTypes.values()].filter((n) => n.pure).map((n) => n.type),
    ...(understands.history === LEAN_HISTORY ? { history: LEAN_HISTORY } : {}),
    // Granted only to workflow code that asked: earlier code would schedule a regular activity for a node the answer made local.
    ...(understands.local === SHORT_LOCAL_NODES && SVC_LOCAL_CALL_MAX_MS > 0
      ? { shortLocal: { types: shortLocalTypes(), maxTimeoutMs: SVC_LOCAL_CALL_MAX_MS } }
      : {}),
    // Granted only to workflow code that asked: earlier code would end the run with a step of its own after it had ended.
    ...(understands.close === CLOSE_IN_NODE ? { closeInNode: true as const } : {}),
    // Granted only to workflow code that asked: earlier code would upsert a start memo the history does not have.
    ...(understands.marks === LOCAL_MARKED_AT_END ? { localMarkedAtEnd: true as const } : {}),
    // Granted only to workflow code that asked: earlier code would take a reference for a value.
    ...(understands.refs === REFS_HISTORY
      ? { bounds: { inlineBytes: SVC_HISTORY_INLINE_BYTES, contextBytes: SVC_NODE_CONTEXT_INLINE_BYTES, maxRunning: SVC_RUN_MAX_PARALLEL_NODES } }
      : {}),
  };
}
