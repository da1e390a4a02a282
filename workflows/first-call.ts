// The input a new run's first call is given, known before the run begins: the API runs that call
// ahead of its activity from it (src/executions/early-runs.ts). Pure: the same steps the graph
// workflow takes for the node it starts first (run-values.ts, run-modes.ts), no Temporal API.
import { firstCallOf, type BeganExecution, type RunGraphInput, type RunNodeInput } from './defs.js';
import { GraphState } from './graph.js';
import { notRunNodes } from './run-state.js';
import { RunValues } from './run-values.js';

/**
 * What a new run's first workflow task gives the local activity of its first call (see
 * firstCallOf), as the workflow builds it: the node, its expression context from the run's
 * payload, the run's bounds and, when the node is the run's last (no edge leaves it), the outcome
 * its success writes. Undefined when the run does not start with one short call.
 */
export function firstCallInput(input: RunGraphInput, began: BeganExecution): RunNodeInput | undefined {
  const node = firstCallOf(began);
  if (!node) return undefined;
  const values = new RunValues(input.payload, began.bounds, input.payloadRef !== undefined || input.payloadInRecord === true);
  const nodes = new Map(began.graph.nodes.map((n) => [n.id, n]));
  // The run's only root, nothing else in flight or waiting: it is the last to run when no edge leaves it.
  const last = began.closeInNode === true && !began.graph.edges.some((e) => e.from === node.id);
  return {
    node,
    context: values.contextFor(node),
    ...(began.bounds ? { inlineBytes: began.bounds.inlineBytes } : {}),
    ...(last ? { closes: { status: 'success', skipped: notRunNodes(new GraphState(began.graph), nodes, false) } } : {}),
  };
}
