import type { Graph, GraphEdge } from './defs.js';

/**
 * Pure scheduling state of one run: which nodes may start, which are skipped. A node runs once
 * every incoming edge is decided and at least one is live; it is skipped when all are dead.
 * An edge is live when its source finished (or failed with on_error "continue") and the edge's
 * branch, if any, is the branch the source took.
 */
export class GraphState {
  private readonly incoming = new Map<string, GraphEdge[]>();
  private readonly outgoing = new Map<string, GraphEdge[]>();
  /** Per node: done (with its branch) or skipped. */
  private readonly finished = new Map<string, { skipped: boolean; branch?: string }>();
  private readonly started = new Set<string>();

  constructor(private readonly graph: Graph) {
    for (const node of graph.nodes) {
      this.incoming.set(node.id, []);
      this.outgoing.set(node.id, []);
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

  /** Marks a node done without running it (a reused output when replaying from a node). */
  seed(nodeId: string, branch?: string): void {
    this.started.add(nodeId);
    this.complete(nodeId, branch);
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
  const parents = new Map<string, string[]>();
  for (const e of graph.edges) parents.set(e.to, [...(parents.get(e.to) ?? []), e.from]);
  const seen = new Set<string>();
  const stack = [...(parents.get(target) ?? [])];
  while (stack.length) {
    const id = stack.pop()!;
    if (seen.has(id)) continue;
    seen.add(id);
    stack.push(...(parents.get(id) ?? []));
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
