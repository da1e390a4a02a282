import type { Config } from '../config.js';

/** USD per 1,000 tokens, in and out, per model id (SVC_AGENT_PRICES). */
export type PriceTable = Config['SVC_AGENT_PRICES'];

/** Cost of a model call; a model missing from the table costs 0 (the session metadata says so). */
export function costOf(prices: PriceTable, model: string, tokensIn: number, tokensOut: number): number {
  if (!hasPrice(prices, model)) return 0;
  const price = prices[model]!;
  return Math.round(((tokensIn / 1000) * price.in + (tokensOut / 1000) * price.out) * 1e6) / 1e6;
}

/** Own keys only: a model named like an Object.prototype member (`constructor`) has no price. */
export const hasPrice = (prices: PriceTable, model: string) => Object.hasOwn(prices, model);
