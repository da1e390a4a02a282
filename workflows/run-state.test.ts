import { describe, expect, it } from 'vitest';
import type { Graph, GraphNode } from './defs.js';
import { GraphState } from './graph.js';
import { handledFailures, notRunNodes, runStatus, seedRun } from './run-state.js';
import { RunValues } from './run-values.js';

// start -> check -(true)-> yes, check -(false)-> no; yes -> end
const graph: Graph = {
  nodes: [
    { id: 'start', type: 'transform', config: {} },
    { id: 'check', type: 'condition', config: {} },
    { id: 'yes', type: 'http_request', config: {} },
    { id: 'no', type: 'transform', config: {} },
    { id: 'end', type: 'delay', config: {} },
  ],
  edges: [
    { from: 'start', to: 'check' },
    { from: 'check', to: 'yes', branch: 'true' },
    { from: 'check', to: 'no', branch: 'false' },
    { from: 'yes', to: 'end' },
  ],
};
const nodes = new Map<string, GraphNode>(graph.nodes.map((n) => [n.id, n]));

describe('seedRun', () => {
  it('counts seeded nodes as finished, on the branch a condition’s result names', () => {
    const state = new GraphState(graph);
    const values = new RunValues(null, undefined);
    seedRun(state, values, { start: { value: 1 }, check: { result: true } });
    expect(values.inline()).toEqual({ start: { value: 1 }, check: { result: true } });
    expect(state.ready()).toEqual(['yes']);
    expect(state.skippedNodes()).toEqual(['no']);
  });

  it('prefers an output’s `branch` to its `result`, and takes null outputs as finished without a branch', () => {
    const state = new GraphState(graph);
    const values = new RunValues(null, undefined);
    seedRun(state, values, { start: null, check: { branch: 'false', result: true } });
    expect(values.inline()).toEqual({ start: null, check: { branch: 'false', result: true } });
    expect(state.ready()).toEqual(['no']);
  });

  it('leaves a run without a seed as it was', () => {
    const state = new GraphState(graph);
    const values = new RunValues(null, undefined);
    seedRun(state, values, undefined);
    expect(values.inline()).toEqual({});
    expect(state.ready()).toEqual(['start']);
  });
});

describe('runStatus', () => {
  const error = { code: 'node_failed', message: 'boom', node_id: 'yes' };
  it('says cancelled over failed, failed over partial, partial over success', () => {
    expect(runStatus({ cancelled: new Error('cancelled'), failure: error, partial: true })).toBe('cancelled');
    expect(runStatus({ cancelled: undefined, failure: error, partial: true })).toBe('failed');
    expect(runStatus({ cancelled: undefined, failure: undefined, partial: true })).toBe('partial');
    expect(runStatus({ cancelled: undefined, failure: undefined, partial: false })).toBe('success');
  });
});

describe('notRunNodes', () => {
  /** The example graph with start and check done, check on its `true` branch: `no` is skipped, `yes` runs. */
  function pastCheck(): GraphState {
    const state = new GraphState(graph);
    expect(state.ready()).toEqual(['start']);
    state.complete('start');
    expect(state.ready()).toEqual(['check']);
    state.complete('check', 'true');
    expect(state.ready()).toEqual(['yes']);
    return state;
  }

  it('lists the branches not taken, with their node types', () => {
    expect(notRunNodes(pastCheck(), nodes, false)).toEqual([{ id: 'no', type: 'transform' }]);
  });

  it('adds every node that did not finish when the run stopped early', () => {
    expect(notRunNodes(pastCheck(), nodes, true)).toEqual([
      { id: 'no', type: 'transform' },
      { id: 'yes', type: 'http_request' },
      { id: 'end', type: 'delay' },
    ]);
  });
});

describe('seeding a reused failure that took its error edges', () => {
  it('counts it as failed into those edges, whatever its output says', () => {
    const g: Graph = {
      nodes: [
        { id: 'pay', type: 'http_request', config: {}, on_error: 'branch' },
        { id: 'ship', type: 'transform', config: {} },
        { id: 'notify', type: 'transform', config: {} },
      ],
      edges: [
        { from: 'pay', to: 'ship' },
        { from: 'pay', to: 'notify', branch: 'error' },
      ],
    };
    const state = new GraphState(g);
    const values = new RunValues(null, undefined);
    const failure = { error: { code: 'http_error', message: 'HTTP 402', data: { status: 402 } } };
    seedRun(state, values, { pay: failure }, undefined, ['pay']);
    expect(values.inline()).toEqual({ pay: failure });
    expect(state.ready()).toEqual(['notify']);
    expect(state.skippedNodes()).toEqual(['ship']);
  });

  it('lists the handled failures with the output each became', () => {
    const types = new Map<string, GraphNode>([['a', { id: 'a', type: 'fail', config: {} }]]);
    expect(handledFailures(['a'], types, { a: { error: { code: 'x', message: 'm' } }, b: 1 })).toEqual([
      { id: 'a', type: 'fail', output: { error: { code: 'x', message: 'm' } } },
    ]);
    // One held by reference was stored whole by its activity: finishing the run does not write it again.
    expect(handledFailures(['a', 'big'], new Map([...types, ['big', { id: 'big', type: 'http_request', config: {} }]]), { a: 1 })).toEqual([
      { id: 'a', type: 'fail', output: 1 },
    ]);
  });
});
