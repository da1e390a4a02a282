import type { EventStore } from '../src/events/event.store.js';
import type { Metrics } from '../src/platform/metrics.js';
import type { GraphNode, RegisteredWait, RunNodeInput, RunNodeOutput, WaitEnd } from '../workflows/defs.js';
import { patiently } from './patiently.js';
import { answer } from './run-values.js';
import { RunSteps, type RunExecution, type RunStepPorts } from './run-steps.js';
import { countAttempt } from './graph.activities.js';

// The steps of a wait_for_event node (workflows/wait-for-event.ts): register the wait, record its end.

export interface WaitActivityPorts extends RunStepPorts {
  stores: { events: Pick<EventStore, 'registerWait' | 'endWait' | 'closeWait'> };
  metrics: Pick<Metrics, 'workflowWaits' | 'nodeAttempts' | 'nodeDuration'>;
}

interface WaitConfig {
  event: string;
  key: string;
  timeout_ms: number;
  lookback_ms: number;
}

export function waitActivities(ports: WaitActivityPorts, execution: RunExecution) {
  const steps = new RunSteps(ports, execution);
  return {
    registerWait: (input: RunNodeInput, runId: string) => registerWait(ports, steps, input, runId),
    endWait: (end: WaitEnd) => endWait(ports, steps, end),
    closeWait: (waitId: string) => patiently(() => ports.stores.events.closeWait(waitId)),
  };
}

/**
 * The wait's first step: evaluates its key, shows the node running, and registers the wait (taking
 * an event sent within its lookback window, if one is kept). Idempotent on the run and node.
 */
async function registerWait(ports: WaitActivityPorts, steps: RunSteps, { node, context }: RunNodeInput, runId: string): Promise<RegisteredWait> {
  const ref = await steps.execution(runId);
  const startedAt = new Date();
  try {
    const { input, config } = await steps.config<WaitConfig>(ref, node, context);
    await steps.write(ref, node, { status: 'running', started_at: startedAt, attempts: 1, input });
    const wait = await patiently(() =>
      ports.stores.events.registerWait({
        executionId: ref.id,
        workflowId: ref.workflowId,
        nodeId: node.id,
        temporalWorkflowId: steps.temporalWorkflowId(),
        runId,
        name: config.event,
        key: config.key,
        lookbackMs: config.lookback_ms,
      }),
    );
    return { waitId: wait.waitId, timeoutMs: config.timeout_ms, ...(wait.event ? { event: wait.event } : {}) };
  } catch (err) {
    throw await steps.failed(ref, node, err, startedAt);
  }
}

/** The wait ended: the stored wait settles a timeout against a delivery at the same moment; the node's output says which won. */
async function endWait(ports: WaitActivityPorts, steps: RunSteps, end: WaitEnd): Promise<RunNodeOutput> {
  const ref = await steps.execution(end.runId);
  const settled = await patiently(() => ports.stores.events.endWait(end.waitId, end.event));
  const output = settled.event ? { event: settled.event, branch: 'received' } : { timed_out: true, branch: 'timeout' };
  await steps.ended(ref, end.node, output, end.startedAt);
  countEnd(ports, end.node, output.branch, end.startedAt);
  return answer(end.node.id, { output, branch: output.branch }, end.inlineBytes);
}

function countEnd(ports: WaitActivityPorts, node: GraphNode, outcome: string, startedAt: number): void {
  ports.metrics.workflowWaits.inc({ outcome: outcome === 'received' ? 'received' : 'timeout' });
  countAttempt(ports.metrics, node.type, 'success', undefined, Math.max(0, Date.now() - startedAt));
}
