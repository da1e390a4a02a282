import type { WorkflowHandle } from '@temporalio/client';

type History = Awaited<ReturnType<WorkflowHandle['fetchHistory']>>;

/**
 * A run's whole history once Temporal has closed it. A wait for a run's result may answer from the
 * record the run's last node ended, a few milliseconds before the run's last workflow task is
 * written: a test that reads the history after such an answer waits for the close first.
 */
export async function closedHistory(handle: { result(): Promise<unknown>; fetchHistory(): Promise<History> }): Promise<History> {
  await handle.result().catch(() => undefined);
  return handle.fetchHistory();
}
