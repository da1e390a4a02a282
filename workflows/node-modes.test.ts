import { describe, expect, it } from 'vitest';
import { nodeModeOf, type BeganExecution } from './defs.js';

const began = (extra: Partial<BeganExecution> = {}): BeganExecution => ({
  executionId: 1,
  version: 1,
  graph: { nodes: [], edges: [] },
  runModes: { http_request: 'activity', transform: 'local', delay: 'timer' },
  ...extra,
});
const http = (timeout_ms?: number) => ({ type: 'http_request', ...(timeout_ms !== undefined ? { timeout_ms } : {}) });

describe('how a run runs a node', () => {
  it('runs a short call of a short-local type locally: its timeout (30 s when unset) at most the answer’s', () => {
    const short = began({ shortLocal: { types: ['http_request'], maxTimeoutMs: 30_000 } });
    expect(nodeModeOf(short, http())).toBe('local');
    expect(nodeModeOf(short, http(30_000))).toBe('local');
    expect(nodeModeOf(short, http(30_001))).toBe('activity');
    expect(nodeModeOf(began({ shortLocal: { types: ['http_request'], maxTimeoutMs: 10_000 } }), http())).toBe('activity');
  });

  it('leaves every other type, and every run whose first step did not grant it, as its type says', () => {
    const short = began({ shortLocal: { types: ['http_request'], maxTimeoutMs: 30_000 } });
    expect(nodeModeOf(short, { type: 'delay' })).toBe('timer');
    expect(nodeModeOf(short, { type: 'transform' })).toBe('local');
    expect(nodeModeOf(began(), http(1))).toBe('activity');
  });
});
