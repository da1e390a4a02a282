// Hand-written Temporal workflows: the baselines the engine is measured against.
import { proxyActivities, proxyLocalActivities, sleep } from '@temporalio/workflow';

interface BaselineActivities {
  noop(): Promise<null>;
  /** One HTTP GET to the benchmark's local target: what an http_request node does, bare. */
  get(url: string): Promise<number>;
  /** The same GET, answering the parsed JSON body: what a webhook that responds with its HTTP call's answer needs. */
  getJson(url: string): Promise<unknown>;
}

const { noop, get, getJson } = proxyActivities<BaselineActivities>({ startToCloseTimeout: '30s' });
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

/** A webhook's run, hand-written: one HTTP GET (a regular activity, or a local one) whose answer is the result. */
export async function bareHook(url: string, useLocal = false): Promise<unknown> {
  return useLocal ? local.getJson(url) : getJson(url);
}
