// How each node of a run runs (a regular or a local activity, a timer, a child...), decided as it
// starts, and which node ends the run's record. Deterministic workflow code.
import { workflowInfo } from '@temporalio/workflow';
import { isShortCall, nodeModeOf, type GraphNode, type NodeRunMode, type RunCloses } from './defs.js';
import { handledFailures, notRunNodes } from './run-state.js';
import type { Scope } from './run-scope.js';

/**
 * How a node runs: as its start decided (startCall), else as the run's first step said for its
 * type (a for_each body's nodes: their items workflow was told each type's mode).
 */
export const modeOf = (run: Scope, node: GraphNode): NodeRunMode => run.modes?.get(node.id) ?? nodeModeOf(run.began, node);

export const runsLocally = (run: Scope, node: GraphNode) => modeOf(run, node) === 'local';

/** A regular activity's own events mark its start and end in the history of a lean run. */
export const markedByTemporal = (run: Scope, node: GraphNode) => run.lean && modeOf(run, node) === 'activity';

/**
 * Decides how a graph run's node runs as it starts. A short call (a side effect the run's first
 * step allows to run locally) runs as a local activity only when no other such call is in flight
 * and none began or ended in this workflow task: a local activity's result is recorded when the
 * task that ran it completes, so at most one performed call at a time may be unrecorded, and a
 * worker that dies repeats only that one, as it would repeat a regular activity whose completion
 * it never reported. Otherwise it runs as a regular activity, whose scheduling completes the task
 * (and so records the calls before it). Deterministic: workflow task boundaries (the history's
 * length) fall at the same points on replay. Answers whether it is a local call.
 */
export function startCall(run: Scope, node: GraphNode): boolean {
  const { modes, calls } = run;
  if (!modes || !calls) return false;
  let mode = nodeModeOf(run.began, node);
  const call = isShortCall(run.began, node);
  if (call && (calls.inFlight > 0 || calls.task === workflowInfo().historyLength)) mode = 'activity';
  modes.set(node.id, mode);
  if (mode !== 'local' || !call) return false;
  calls.inFlight++;
  calls.task = workflowInfo().historyLength;
  return true;
}

/** A local call ended (in this workflow task): the next one waits for a task of its own. */
export function endCall(run: Scope, call: boolean): void {
  if (!call || !run.calls) return;
  run.calls.inFlight--;
  run.calls.task = workflowInfo().historyLength;
}

/** A local node marked once, when it ends (see BeganExecution.localMarkedAtEnd). */
export const markedAtEnd = (run: Scope, node: GraphNode) => run.lean && run.began.localMarkedAtEnd === true && runsLocally(run, node);

/** What the run's last node writes with its entry when it succeeds: the run's outcome then. */
export function closesOf(run: Scope, node: GraphNode): { closes?: RunCloses } {
  if (run.closing !== node.id) return {};
  const handled = run.handled.length ? { handled: handledFailures(run.handled, run.nodes, run.values.inline()) } : {};
  return { closes: { status: run.partial ? 'partial' : 'success', skipped: notRunNodes(run.state, run.nodes, false), ...handled } };
}

/**
 * Whether `id`, about to start, is the run's last node: nothing else runs or waits, and no edge
 * leaves it, so once it succeeds nothing else can start and the run ends as closesOf says. Only a
 * graph run's own nodes (not a for_each item's) end its record.
 */
export const lastToRun = (run: Scope, id: string, othersInFlight: number) =>
  !run.item && run.modes !== undefined && run.began.closeInNode === true && othersInFlight === 0 && !run.began.graph.edges.some((e) => e.from === id);
