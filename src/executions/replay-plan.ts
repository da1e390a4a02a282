// Which nodes a replay from a node runs, reuses and leaves skipped (ExecutionService.replay and its
// dry run). Pure: the graph of the replayed version and the execution's timeline in, the plan
// out, so it is unit tested on its own (replay-plan.test.ts).
//
// The rule: a replay from node F runs F and every node downstream of it (its descendants, along
// any edge). Every other node that ran keeps its recorded outcome: an output (reused, not run
// again, its side effects not sent again), or a failure it handled (on_error continue or branch:
// its `{error}` output, and for branch its error edges). Nodes skipped on a branch a reused node
// did not take stay skipped. What has no outcome to keep (a node that failed and stopped the run,
// one a cancel cut off, one the run never reached) runs: it never finished. A node type whose
// own work can be partly kept (a loop's items) decides that in `nodePlan`, beside the rule.
import { conflict } from '../platform/errors.js';
import type { Graph, GraphNode } from '../../workflows/defs.js';
import { GraphState, descendants } from '../../workflows/graph.js';
import { seedRun } from '../../workflows/run-state.js';
import { referencedNodes } from '../../workflows/references.js';
import type { TimelineRow } from './execution.mirror.js';

/** What a replay does with one node. */
export type ReplayAction = 'run' | 'reuse' | 'skip';

export interface NodePlan {
  node_id: string;
  action: ReplayAction;
  /** How the node ended in the replayed execution (`not_run`: no entry in its timeline). */
  was: string;
}

export interface ReplayPlan {
  fromNodeId: string;
  nodes: NodePlan[];
  /** Nodes the replay runs (F, its descendants, and nodes with no outcome to keep): some may be skipped when it decides its branches. */
  run: string[];
  /** Nodes whose recorded outcome the replay keeps. */
  reused: string[];
  /** Nodes that stay skipped: only branches a reused node did not take lead to them. */
  skipped: string[];
  /**
   * The reused outputs, by node (RunGraphInput.seed): whole for the nodes a node that runs reads,
   * else only what routes the run (`branch`, `result`), so the new run's input stays small.
   */
  seed: Record<string, unknown>;
  /** Reused failures that took their node's error edges (RunGraphInput.seedErrors). */
  seedErrors: string[];
}

type Row = Pick<TimelineRow, 'node_id' | 'status' | 'output'>;

/** Whether a node's recorded outcome is kept, and as what. */
function nodePlan(node: GraphNode, row: Row | undefined, downstream: boolean): { reuse: false } | { reuse: true; output: unknown; intoErrorEdges: boolean } {
  if (downstream || !row) return { reuse: false };
  if (row.status === 'success') return { reuse: true, output: row.output ?? null, intoErrorEdges: false };
  // A failure the run handled is recorded with the output `{error}` it became (a failure that
  // stopped the run, or one recorded before handled failures kept their output, has none).
  const handled = row.status === 'failed' && (node.on_error === 'continue' || node.on_error === 'branch');
  const output = row.output as { error?: unknown } | null;
  if (handled && output && typeof output === 'object' && output.error) return { reuse: true, output, intoErrorEdges: node.on_error === 'branch' };
  return { reuse: false };
}

/**
 * The plan of a replay of execution `executionId` from `fromNodeId`. Refused (409 `node_not_run`)
 * when that node did not run in it: replaying from a node that was skipped or never reached
 * would decide the same again.
 */
export function planReplay(graph: Graph, timeline: Row[], fromNodeId: string, executionId: number | string): ReplayPlan {
  const rows = new Map(timeline.map((t) => [t.node_id, t]));
  const from = rows.get(fromNodeId);
  if (!from || from.status === 'skipped' || from.status === 'running') {
    throw conflict(
      'node_not_run',
      `Node ${fromNodeId} did not run in execution ${executionId} (${from ? `it was ${from.status}` : 'never reached'}); replay from a node that ran, or replay the whole run`,
    );
  }
  const downstream = descendants(graph, fromNodeId).add(fromNodeId);
  const seed: Record<string, unknown> = {};
  const seedErrors: string[] = [];
  for (const node of graph.nodes) {
    const plan = nodePlan(node, rows.get(node.id), downstream.has(node.id));
    if (!plan.reuse) continue;
    seed[node.id] = plan.output;
    if (plan.intoErrorEdges) seedErrors.push(node.id);
  }
  // What the reused outcomes alone decide is skipped, exactly as the replay's run will find it.
  const state = new GraphState(graph);
  seedRun(state, { set: () => undefined }, seed, undefined, seedErrors);
  state.ready();
  const skipped = new Set(state.skippedNodes());
  const nodes = graph.nodes.map((n): NodePlan => {
    const action: ReplayAction = n.id in seed ? 'reuse' : skipped.has(n.id) ? 'skip' : 'run';
    return { node_id: n.id, action, was: rows.get(n.id)?.status ?? 'not_run' };
  });
  const pick = (action: ReplayAction) => nodes.filter((n) => n.action === action).map((n) => n.node_id);
  const run = pick('run');
  return { fromNodeId, nodes, run, reused: pick('reuse'), skipped: pick('skip'), seed: slimSeed(graph, seed, run), seedErrors };
}

/**
 * The seed with whole outputs only where a node that runs reads them (`nodes.<id>` in its
 * configuration; every one when a node reads `nodes` in a way that cannot be told). The others
 * keep what the run's routing reads of a reused output (its `branch`, or a condition's `result`).
 */
function slimSeed(graph: Graph, seed: Record<string, unknown>, run: string[]): Record<string, unknown> {
  const running = new Set(run);
  const read = new Set<string>();
  for (const node of graph.nodes) {
    if (!running.has(node.id)) continue;
    const names = referencedNodes(node.config);
    if (!names) return seed;
    names.forEach((id) => read.add(id));
  }
  return Object.fromEntries(
    Object.entries(seed).map(([id, output]) => {
      if (read.has(id)) return [id, output];
      const { branch, result } = (output && typeof output === 'object' ? output : {}) as { branch?: unknown; result?: unknown };
      const routing = { ...(branch !== undefined ? { branch } : {}), ...(result !== undefined ? { result } : {}) };
      return [id, Object.keys(routing).length ? routing : null];
    }),
  );
}

/**
 * Whether a Temporal reset to the point where the node started keeps exactly the plan's reused
 * nodes (`kept`: the nodes finished before that point): then it runs exactly what the plan runs,
 * and is the replay. Otherwise (a sibling branch still in flight or started after the node, a
 * local node finished in the same workflow task) the replay is a new run seeded with the plan.
 */
export function resetKeepsPlan(plan: Pick<ReplayPlan, 'reused'>, kept: readonly string[]): boolean {
  const reused = new Set(plan.reused);
  return kept.length === reused.size && kept.every((id) => reused.has(id));
}
