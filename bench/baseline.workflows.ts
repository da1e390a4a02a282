// Hand-written Temporal workflows: the baselines the engine is measured against.
import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';

interface Noop {
  noop(): Promise<null>;
}

const { noop } = proxyActivities<Noop>({ startToCloseTimeout: '30s' });
const local = proxyLocalActivities<Noop>({ startToCloseTimeout: '30s' });

/** N no-op activities one after the other. */
export async function bareChain(n: number, useLocal = false): Promise<number> {
  for (let i = 0; i < n; i++) await (useLocal ? local.noop() : noop());
  return n;
}

/** The smallest run: one no-op activity. */
export async function bareOne(): Promise<null> {
  return noop();
}
