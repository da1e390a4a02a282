// Hand-written Temporal workflows: the baselines the engine is measured against.
import { executeChild, proxyActivities, proxyLocalActivities, sleep } from '@temporalio/workflow';

interface BaselineActivities {
  noop(): Promise<null>;
  /** One HTTP GET to the benchmark's local target: what an http_request node does, bare. */
  get(url: string): Promise<number>;
  /** The same GET, answering the parsed JSON body: what a webhook that responds with its HTTP call's answer needs. */
  getJson(url: string): Promise<unknown>;
  /** What a transform body does to one item, in plain code. */
  transform(item: number): Promise<{ twice: number; at: number }>;
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

/**
 * A fan-out as the Temporal samples write one: child workflows over pages of items, one page
 * after the other, each running its items `concurrency` at a time (a local activity each for
 * `transform`, a GET activity each for `http`). What a for_each node does, bare.
 */
export async function bareForEach(total: number, pageSize: number, concurrency: number, kind: 'transform' | 'http', url: string): Promise<number> {
  let done = 0;
  for (let from = 0; from < total; from += pageSize) {
    done += await executeChild(bareForEachPage, { args: [from, Math.min(total, from + pageSize), concurrency, kind, url] });
  }
  return done;
}

/** One page of bareForEach: items [from, to), `concurrency` in flight. */
export async function bareForEachPage(from: number, to: number, concurrency: number, kind: 'transform' | 'http', url: string): Promise<number> {
  let next = from;
  let done = 0;
  const lane = async () => {
    while (next < to) {
      const item = next++;
      if (kind === 'transform') await local.transform(item);
      else await get(`${url}/item/${item}`);
      done++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  return done;
}
