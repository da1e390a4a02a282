// The values a graph run holds (its trigger payload and its nodes' outputs) and the context each
// node is given, inline or by reference. Pure: no Temporal API, unit tested in run-values.test.ts.
import type { GraphNode, NodeContext, OutputRef, RunBounds, RunNodeOutput } from './defs.js';
import { referencedNodes } from './references.js';

/** Bytes of a string encoded as UTF-8 (no Buffer or TextEncoder needed in workflow code). */
export function utf8Bytes(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code >= 0x800)
      bytes += code >= 0xd800 && code <= 0xdfff ? 1 : 2; // a surrogate pair is 4 bytes
    else if (code >= 0x80) bytes += 1;
  }
  return bytes;
}

/** JSON size of a value as it is stored and sent. */
export const jsonBytes = (value: unknown): number => utf8Bytes(JSON.stringify(value ?? null));

/**
 * A node's outcome as the run keeps it: its value inline (`kept` when the timeline holds it too,
 * so it may go by reference), or a reference to where it is kept.
 */
type Held = { value: unknown; bytes: number; kept: boolean } | { ref: OutputRef };

/**
 * What a run knows of its values. Without bounds (runs begun on workflow code that passed every
 * value inline) it behaves as that code did: every referenced output and the whole payload go
 * with each node.
 */
export class RunValues {
  private readonly held = new Map<string, Held>();
  private readonly triggerBytes: number;
  private last: Held | undefined;

  constructor(
    private readonly trigger: unknown,
    private readonly bounds: RunBounds | undefined,
    /** The trigger payload is not in the run's input (a child's large payload): activities read it. */
    private readonly triggerByRef = false,
    /** Its size, when known already (a fork). */
    triggerBytes?: number,
  ) {
    this.triggerBytes = triggerBytes ?? (bounds && !triggerByRef ? jsonBytes(trigger) : 0);
  }

  /**
   * A copy holding the same trigger payload and outputs, under other bounds: a for_each item's
   * body runs on one, so it sees the outer nodes, and its own nodes' outputs stay its own.
   */
  fork(bounds: RunBounds): RunValues {
    const copy = new RunValues(this.trigger, bounds, this.triggerByRef, this.triggerBytes);
    for (const [id, held] of this.held) copy.held.set(id, held);
    return copy;
  }

  /** A node's outcome as held: inline, or by reference; undefined when it has none. */
  outcome(id: string): { output?: unknown; ref?: OutputRef; bytes?: number } | undefined {
    const held = this.held.get(id);
    if (!held) return undefined;
    return 'ref' in held ? { ref: held.ref } : { output: held.value, bytes: held.bytes };
  }

  /**
   * Records a node's outcome. `last: false` keeps the run's last output as it was (a failure the
   * run went on after); `kept: false` says the timeline does not hold this value as the node's
   * output (the `{error}` of such a failure), so it always goes inline.
   */
  set(id: string, result: Pick<RunNodeOutput, 'output' | 'ref' | 'bytes'>, { last = true, kept = true } = {}): void {
    const held: Held = result.ref ? { ref: result.ref } : { value: result.output, bytes: result.bytes ?? (this.bounds ? jsonBytes(result.output) : 0), kept };
    this.held.set(id, held);
    if (last) this.last = held;
  }

  has(id: string): boolean {
    return this.held.has(id);
  }

  /** The inline outputs, as the workflow code before references kept them (all of them without bounds). */
  inline(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (const [id, h] of this.held) if ('value' in h) out[id] = h.value;
    return out;
  }

  /** The run's last output, inline or by reference, as the run's result carries it. */
  lastOutput(): { lastOutput?: unknown; lastOutputRef?: OutputRef } {
    if (!this.last) return {};
    return 'ref' in this.last ? { lastOutputRef: this.last.ref } : this.last.value === undefined ? {} : { lastOutput: this.last.value };
  }

  /**
   * The context one node is given: the outputs its expressions name (all of them when that cannot
   * be told) and the trigger payload. With bounds, a node whose configuration holds no `{{ }}` is
   * given nothing, and the inline part stays within `contextBytes`: what does not fit, and
   * whatever is kept by reference, goes as a reference for the activity to read.
   */
  contextFor(node: Pick<GraphNode, 'config'>): NodeContext {
    const names = referencedNodes(node.config);
    const ids = names ? names.filter((n) => this.held.has(n)) : [...this.held.keys()];
    if (!this.bounds) return { trigger: this.trigger, nodes: Object.fromEntries(ids.map((id) => [id, (this.held.get(id) as { value: unknown }).value])) };
    if (!hasTemplate(node.config)) return { trigger: null, nodes: {} };
    let left = this.bounds.contextBytes;
    const context: NodeContext = { trigger: null, nodes: {} };
    const refs: Record<string, OutputRef> = {};
    for (const id of ids) {
      const h = this.held.get(id)!;
      if ('value' in h && (h.bytes <= left || !h.kept)) {
        context.nodes[id] = h.value;
        left = Math.max(0, left - h.bytes);
      } else {
        // An inline value that does not fit is in the timeline too: its activity wrote it there.
        refs[id] = 'ref' in h ? h.ref : { node: id, bytes: h.bytes };
      }
    }
    const triggerInline = !this.triggerByRef && this.triggerBytes <= Math.min(left, this.bounds.inlineBytes);
    if (triggerInline) context.trigger = this.trigger;
    if (!triggerInline || Object.keys(refs).length) {
      context.refs = { ...(triggerInline ? {} : { trigger: true as const }), ...(Object.keys(refs).length ? { nodes: refs } : {}) };
    }
    return context;
  }
}

/** Whether a configuration holds any `{{ }}` (a node without one reads no context). */
export function hasTemplate(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('{{');
  if (Array.isArray(value)) return value.some(hasTemplate);
  if (value && typeof value === 'object') return Object.values(value).some(hasTemplate);
  return false;
}
