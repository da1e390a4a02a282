import { ApplicationFailure, Context } from '@temporalio/activity';
import type { ExecutionMirror, ExecutionRef, NodeEntry } from '../src/executions/execution.mirror.js';
import type { ExpressionSandbox } from '../src/nodes/expression-sandbox.js';
import { nodeTypes } from '../src/nodes/index.js';
import type { GraphNode, RunNodeInput } from '../workflows/defs.js';
import { CODE } from '../workflows/error-codes.js';
import { errorOf, invalidConfig, toFailure } from './node-outcome.js';
import { patiently } from './patiently.js';
import { evaluateForNode } from './run-values.js';

// What the steps of the nodes the workflow runs itself (a wait, an approval) share with each other:
// the run's record, the node's configuration with its expressions evaluated, its timeline entry.

export interface RunStepPorts {
  executionMirror: Pick<ExecutionMirror, 'writeNode' | 'readValues'>;
  expressions: Pick<ExpressionSandbox, 'resolve'>;
}

/**
 * The record of the run an activity belongs to, found as every node's activity finds it
 * (currentExecution in graph.activities.ts: claimed, or adopted for a reset run, and cached).
 */
export type RunExecution = (runId: string) => Promise<ExecutionRef>;

export class RunSteps {
  constructor(
    private readonly ports: RunStepPorts,
    /** The record of the run an activity belongs to. */
    readonly execution: RunExecution,
  ) {}

  /** The Temporal workflow id of the run the current activity belongs to. */
  temporalWorkflowId(): string {
    return Context.current().info.workflowExecution!.workflowId;
  }

  /** The node's configuration with its `{{ }}` evaluated and checked against its type's schema. */
  async config<C>(ref: ExecutionRef, node: GraphNode, context: RunNodeInput['context']): Promise<{ input: unknown; config: C }> {
    const type = nodeTypes.get(node.type);
    if (!type) throw ApplicationFailure.nonRetryable(`Unknown node type ${node.type}`, CODE.validation_failed);
    // These nodes run outside a loop's items: no item values to read (the ports given may hold them).
    const input = await evaluateForNode({ executionMirror: this.ports.executionMirror, expressions: this.ports.expressions }, ref, context, node.config);
    const parsed = (type.resolvedSchema ?? type.configSchema).safeParse(input);
    if (!parsed.success) throw invalidConfig(parsed.error.issues);
    return { input, config: parsed.data as C };
  }

  write(ref: ExecutionRef, node: Pick<GraphNode, 'id' | 'type'>, entry: NodeEntry): Promise<void> {
    return patiently(() => this.ports.executionMirror.writeNode(ref.id, node, entry));
  }

  /** The node failed in its step: its timeline entry says how; answers the failure to throw. */
  async failed(ref: ExecutionRef, node: GraphNode, err: unknown, startedAt: Date): Promise<Error> {
    const failure = toFailure(err);
    await this.write(ref, node, {
      status: 'failed',
      started_at: startedAt,
      finished_at: new Date(),
      attempts: 1,
      input: node.config,
      error: errorOf(failure),
    }).catch(() => undefined);
    return failure;
  }

  /** The node ended with `output`: its timeline entry. */
  ended(ref: ExecutionRef, node: GraphNode, output: unknown, startedAt: number): Promise<void> {
    const finished = Date.now();
    return this.write(ref, node, {
      status: 'success',
      started_at: new Date(startedAt),
      finished_at: new Date(finished),
      duration_ms: Math.max(0, finished - startedAt),
      attempts: 1,
      output,
    });
  }
}
