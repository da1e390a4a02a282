import { describe, expect, it } from 'vitest';
import { firstCallOf, isShortCall, nodeModeOf, type BeganExecution, type GraphNode } from './defs.js';

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

describe('the first call a new run starts', () => {
  const short = { shortLocal: { types: ['http_request'], maxTimeoutMs: 30_000 } };
  const node = (id: string, type = 'http_request', extra: Partial<GraphNode> = {}): GraphNode => ({ id, type, config: {}, ...extra });
  const graph = (nodes: GraphNode[], edges: { from: string; to: string }[] = []) => began({ ...short, graph: { nodes, edges } });

  it('is a short call: a side effect run locally, not a pure node run locally', () => {
    expect(isShortCall(began(short), http())).toBe(true);
    expect(isShortCall(began(short), http(30_001))).toBe(false);
    expect(isShortCall(began(short), { type: 'transform' })).toBe(false);
    expect(isShortCall(began(), http())).toBe(false);
  });

  it('is the one root of the graph when that root is a short call', () => {
    expect(firstCallOf(graph([node('get'), node('next', 'transform')], [{ from: 'get', to: 'next' }]))?.id).toBe('get');
    expect(firstCallOf(graph([node('next', 'http_request'), node('get')], [{ from: 'get', to: 'next' }]))?.id).toBe('get');
  });

  it('is none when the root is no short call, or the graph has several roots', () => {
    expect(firstCallOf(graph([node('shape', 'transform'), node('get')], [{ from: 'shape', to: 'get' }]))).toBeUndefined();
    expect(firstCallOf(graph([node('get', 'http_request', { timeout_ms: 60_000 })]))).toBeUndefined();
    expect(firstCallOf(graph([node('a'), node('b')]))).toBeUndefined();
    expect(firstCallOf(graph([]))).toBeUndefined();
    expect(firstCallOf(began({ graph: { nodes: [node('get')], edges: [] } }))).toBeUndefined();
  });
});
