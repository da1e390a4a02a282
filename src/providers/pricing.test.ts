import { describe, expect, it } from 'vitest';
import { loadConfig } from '../config.js';
import { costOf, hasPrice } from './pricing.js';

const pricesOf = (json: string) => loadConfig({ SVC_AGENT_PRICES: json }).SVC_AGENT_PRICES;

describe('agent price table', () => {
  const prices = pricesOf('{"gpt-4o": {"in": 0.0025, "out": 0.01}}');

  it('prices tokens per 1,000, in and out', () => {
    expect(costOf(prices, 'gpt-4o', 2000, 500)).toBe(0.01);
  });

  it('costs 0 for unknown models, including names of Object.prototype members', () => {
    expect(costOf(prices, 'other', 1000, 1000)).toBe(0);
    expect(costOf(prices, 'constructor', 1000, 1000)).toBe(0);
    expect(hasPrice(prices, 'toString')).toBe(false);
  });

  it('is read from SVC_AGENT_PRICES, and a bad value names the variable', () => {
    expect(loadConfig({ SVC_AGENT_PRICES: '{"m": {"in": 1, "out": 2}}' }).SVC_AGENT_PRICES).toEqual({ m: { in: 1, out: 2 } });
    expect(loadConfig({}).SVC_AGENT_PRICES).toEqual({});
    expect(() => loadConfig({ SVC_AGENT_PRICES: 'not json' })).toThrow(/SVC_AGENT_PRICES/);
    expect(() => loadConfig({ SVC_AGENT_PRICES: '{"m": {"in": "cheap"}}' })).toThrow(/SVC_AGENT_PRICES/);
  });

  it('refuses a malformed table', () => {
    expect(() => pricesOf('{"m": {"in": -1, "out": 0}}')).toThrow(/SVC_AGENT_PRICES/);
    expect(() => pricesOf('{"m": {"in": 1}}')).toThrow(/SVC_AGENT_PRICES/);
  });
});
