import { describe, expect, it } from 'vitest';
import type { BeganExecution, GraphNode, RunGraphInput } from './defs.js';
import { firstCallInput } from './first-call.js';

const call = (config: Record<string, unknown> = { method: 'GET', path: '/echo' }): GraphNode => ({ id: 'get', type: 'http_request', config });
const began = (nodes: GraphNode[], edges: { from: string; to: string }[] = [], more: Partial<BeganExecution> = {}): BeganExecution => ({
  executionId: 7,
  version: 1,
  graph: { nodes, edges },
  runModes: { http_request: 'activity', transform: 'local' },
  shortLocal: { types: ['http_request'], maxTimeoutMs: 30_000 },
  closeInNode: true,
  bounds: { inlineBytes: 100, contextBytes: 200, maxRunning: 32 },
  ...more,
});
const input = (payload: unknown, more: Partial<RunGraphInput> = {}) => ({ workflowId: 1, trigger: 'manual', payload, ...more }) as RunGraphInput;

describe("a new run's first call, known before the run begins", () => {
  it('is the one root when it is a short call, given what its expressions read and the run ended with it', () => {
    const node = call({ method: 'POST', path: '/echo', body: { n: '{{ trigger.n }}' } });
    expect(firstCallInput(input({ n: 1 }), began([node]))).toEqual({
      node,
      context: { trigger: { n: 1 }, nodes: {} },
      inlineBytes: 100,
      closes: { status: 'success', skipped: [] },
    });
  });

  it('reads nothing without expressions, and does not end a run that goes on after it', () => {
    const shape: GraphNode = { id: 'shape', type: 'transform', config: { value: 1 } };
    expect(firstCallInput(input({ n: 1 }), began([call(), shape], [{ from: 'get', to: 'shape' }]))).toEqual({
      node: call(),
      context: { trigger: null, nodes: {} },
      inlineBytes: 100,
    });
  });

  it('passes a payload larger than the run carries inline, or one kept in the record, by reference', () => {
    const node = call({ method: 'POST', path: '/echo', body: '{{ trigger }}' });
    expect(firstCallInput(input({ big: 'x'.repeat(200) }), began([node]))?.context).toEqual({ trigger: null, nodes: {}, refs: { trigger: true } });
    expect(firstCallInput(input(null, { payloadInRecord: true }), began([node]))?.context).toEqual({ trigger: null, nodes: {}, refs: { trigger: true } });
  });

  it('is none when the graph starts otherwise: two roots, a pure node, a long call', () => {
    const other = { ...call(), id: 'other' };
    expect(firstCallInput(input({}), began([call(), other]))).toBeUndefined();
    expect(firstCallInput(input({}), began([{ id: 'shape', type: 'transform', config: { value: 1 } }]))).toBeUndefined();
    expect(firstCallInput(input({}), began([{ ...call(), timeout_ms: 60_000 }]))).toBeUndefined();
  });
});
