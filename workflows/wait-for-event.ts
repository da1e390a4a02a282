import { CancellationScope, condition, isCancellation, proxyLocalActivities, setHandler } from '@temporalio/workflow';
import type { WaitActivities } from '../activities/index.js';
import type { EventDelivery, GraphNode, RunNodeInput, RunNodeOutput } from './defs.js';
import type { NodeAwaits } from './local-gate.js';
import { eventDeliveredSignal } from './run.signals.js';

// A wait_for_event node: its first step registers the wait (and takes an event sent within its
// lookback window), then a signal races a durable timer. Temporal orders the two in history, so
// the wait resolves once; the step that records the end settles a timeout against a delivery
// stored at the same moment (see WaitStore), so the run, the stored wait and the sender's
// `delivered` agree. Temporal's limits: one timer and one signal per wait, and two short local
// activities, whatever the timeout.

const bookkeeping = proxyLocalActivities<WaitActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20 },
});

/** Deliveries by wait id, for the waits of this run (module state is per workflow run). */
const delivered = new Map<string, EventDelivery>();
let listening = false;

/** One handler for the run's every wait: a delivery for a wait already resolved (or unknown) is kept and ignored. */
function listen(): void {
  if (listening) return;
  listening = true;
  setHandler(eventDeliveredSignal, (delivery) => {
    if (!delivered.has(delivery.waitId)) delivered.set(delivery.waitId, delivery);
  });
}

/** Waits for the node's event or its timeout; the output says which (`branch`: `received` or `timeout`). */
export async function runWaitForEvent(node: GraphNode, context: RunNodeInput['context'], runId: string, awaits: NodeAwaits): Promise<RunNodeOutput> {
  listen();
  const startedAt = Date.now();
  const wait = await awaits.local(() => bookkeeping.registerWait({ node, context }, runId));
  try {
    let event = wait.event;
    // While it waits the node holds no place among the run's nodes in flight.
    if (!event && (await awaits.pause(() => awaits.other(() => condition(() => delivered.has(wait.waitId), wait.timeoutMs))))) {
      event = delivered.get(wait.waitId)!.event;
    }
    const inline = awaits.inlineBytes !== undefined ? { inlineBytes: awaits.inlineBytes } : {};
    return await awaits.local(() => bookkeeping.endWait({ node, runId, waitId: wait.waitId, startedAt, ...(event ? { event } : {}), ...inline }));
  } catch (err) {
    // A cancelled run closes its wait, so no event is reported delivered to it.
    if (isCancellation(err)) await CancellationScope.nonCancellable(() => awaits.local(() => bookkeeping.closeWait(wait.waitId)));
    throw err;
  }
}
