// Hand-written Temporal workflows: the baselines the engine is measured against.
import { proxyActivities, proxyLocalActivities, sleep } from '@temporalio/workflow';

interface BaselineActivities {
  noop(): Promise<null>;
  /** One HTTP GET to the benchmark's local target: what an http_request node does, bare. */
  get(url: string): Promise<number>;
}

const { noop, get } = proxyActivities<BaselineActivities>({ startToCloseTimeout: '30s' });
const local = proxyLocalActivities<BaselineActivities>({ startToCloseTimeout: '30s' });

/** N no-op activities one after the other. */
export async function bareChain(n: number, useLocal = false): Promise<number> {
  for (let i = 0; i < n; i++) await (useLocal ? local.noop() : noop());
  return n;
}

/** N HTTP GETs one after the other, each an activity. */
export async function bareHttpChain(n: number, url: string): Promise<number> {
  for (let i = 0; i < n; i++) await get(url);
  return n;
}

/** The smallest run: one no-op activity. */
export async function bareOne(): Promise<null> {
  return noop();
}

/** One durable timer. */
export async function bareSleep(ms: number): Promise<void> {
  await sleep(ms);
}
