import { ERROR_BRANCH, type Graph, type GraphEdge } from './defs.js';

/**
 * Pure scheduling state of one run: which nodes may start, which are skipped. A node runs once
 * every incoming edge is decided and at least one is live; it is skipped when all are dead.
 * An edge is live when its source finished (or failed with on_error "continue") and the edge's
 * branch, if any, is the branch the source took. A source with on_error "branch" that failed
 * takes its "error" edges only; one that did not fail never takes them.
 */
export class GraphState {
  private readonly incoming = new Map<string, GraphEdge[]>();
  private readonly outgoing = new Map<string, GraphEdge[]>();
  /** Per node: done (with its branch, or failed into its error edges) or skipped. */
  private readonly finished = new Map<string, { skipped: boolean; branch?: string; failed?: boolean }>();
  private readonly started = new Set<string>();
  /** Nodes whose failure takes their "error" edges (on_error "branch"). */
  private readonly errorRouted = new Set<string>();

  constructor(private readonly graph: Graph) {
    for (const node of graph.nodes) {
      this.incoming.set(node.id, []);
      this.outgoing.set(node.id, []);
      if (node.on_error === 'branch') this.errorRouted.add(node.id);
    }
    for (const edge of graph.edges) {
      this.incoming.get(edge.to)?.push(edge);
      this.outgoing.get(edge.from)?.push(edge);
    }
  }

  private edgeState(edge: GraphEdge): 'live' | 'dead' | 'pending' {
    const source = this.finished.get(edge.from);
    if (!source) return 'pending';
    if (source.skipped) return 'dead';
    // Without on_error "branch" on the source, an "error" edge is a switch case like any other.
    const errorEdge = edge.branch === ERROR_BRANCH && this.errorRouted.has(edge.from);
    if (source.failed) return errorEdge ? 'live' : 'dead';
    if (errorEdge) return 'dead';
    if (edge.branch !== undefined && edge.branch !== source.branch) return 'dead';
    return 'live';
  }

  /** Nodes whose inputs are ready and that have not started; marks skipped ones as it goes. */
  ready(): string[] {
    const out: string[] = [];
    let changed = true;
    while (changed) {
      changed = false;
      for (const node of this.graph.nodes) {
        if (this.started.has(node.id) || this.finished.has(node.id)) continue;
        const states = this.incoming.get(node.id)!.map((e) => this.edgeState(e));
        if (states.includes('pending')) continue;
        if (states.length > 0 && !states.includes('live')) {
          this.finished.set(node.id, { skipped: true });
          changed = true; // a skip can decide edges further down
          continue;
        }
        out.push(node.id);
        this.started.add(node.id);
      }
    }
    return out;
  }

  complete(nodeId: string, branch?: string): void {
    this.finished.set(nodeId, { skipped: false, ...(branch !== undefined ? { branch } : {}) });
  }

  /** The node failed and its failure goes on along its "error" edges (on_error "branch"), and only there. */
  fail(nodeId: string): void {
    this.finished.set(nodeId, { skipped: false, failed: true });
  }

  /** Marks a node done without running it (a reused output when replaying from a node). */
  seed(nodeId: string, branch?: string): void {
    this.started.add(nodeId);
    this.complete(nodeId, branch);
  }

  /** Marks a node failed into its error edges without running it (a reused failure when replaying). */
  seedFailure(nodeId: string): void {
    this.started.add(nodeId);
    this.fail(nodeId);
  }

  skippedNodes(): string[] {
    return [...this.finished].filter(([, s]) => s.skipped).map(([id]) => id);
  }

  /** Nodes that never ran nor were skipped (the run stopped early). */
  unfinished(): string[] {
    return this.graph.nodes.map((n) => n.id).filter((id) => !this.finished.has(id));
  }
}

/** Every node from which `target` can be reached, not including `target`. */
export function ancestors(graph: Graph, target: string): Set<string> {
  return reachable(graph, target, 'up');
}

/** Every node reachable from `source` along edges (whatever their branch), not including `source`. */
export function descendants(graph: Graph, source: string): Set<string> {
  return reachable(graph, source, 'down');
}

function reachable(graph: Graph, start: string, direction: 'up' | 'down'): Set<string> {
  const next = new Map<string, string[]>();
  for (const e of graph.edges) {
    const [from, to] = direction === 'up' ? [e.to, e.from] : [e.from, e.to];
    next.set(from, [...(next.get(from) ?? []), to]);
  }
  const seen = new Set<string>();
  const stack = [...(next.get(start) ?? [])];
  while (stack.length) {
    const id = stack.pop()!;
    if (seen.has(id)) continue;
    seen.add(id);
    stack.push(...(next.get(id) ?? []));
  }
  return seen;
}

/** Returns the node ids of one cycle, or undefined when the graph is acyclic. */
export function findCycle(graph: Graph): string[] | undefined {
  const children = new Map<string, string[]>();
  for (const e of graph.edges) children.set(e.from, [...(children.get(e.from) ?? []), e.to]);
  const state = new Map<string, 'visiting' | 'done'>();
  const path: string[] = [];
  const visit = (id: string): string[] | undefined => {
    state.set(id, 'visiting');
    path.push(id);
    for (const next of children.get(id) ?? []) {
      if (state.get(next) === 'visiting') return [...path.slice(path.indexOf(next)), next];
      if (!state.has(next)) {
        const cycle = visit(next);
        if (cycle) return cycle;
      }
    }
    path.pop();
    state.set(id, 'done');
    return undefined;
  };
  for (const node of graph.nodes) {
    if (!state.has(node.id)) {
      const cycle = visit(node.id);
      if (cycle) return cycle;
    }
  }
  return undefined;
}
