import { describe, expect, it } from 'vitest';
import type { Graph, GraphNode } from '../../workflows/defs.js';
import { planReplay, resetKeepsPlan } from './replay-plan.js';

const node = (id: string, type = 'transform', extra: Partial<GraphNode> = {}): GraphNode => ({ id, type, config: {}, ...extra });
const row = (node_id: string, status: string, output: unknown = null) => ({ node_id, status, output });

// start -> left -> charge -> receipt ; start -> right -> audit
const branches: Graph = {
  nodes: [
    node('start'),
    node('left', 'http_request'),
    node('charge', 'http_request', { config: { body: '{{ nodes.left.l }}' } }),
    node('receipt'),
    node('right', 'http_request'),
    node('audit'),
  ],
  edges: [
    { from: 'start', to: 'left' },
    { from: 'left', to: 'charge' },
    { from: 'charge', to: 'receipt' },
    { from: 'start', to: 'right' },
    { from: 'right', to: 'audit' },
  ],
};

describe('a replay from a node', () => {
  it('runs the node and its descendants and reuses every other node that ran, the other branch included', () => {
    const timeline = [
      row('start', 'success', { s: 1 }),
      row('left', 'success', { l: 1 }),
      row('right', 'success', { r: 1 }),
      row('audit', 'success', { a: 1 }),
      row('charge', 'failed'),
      row('receipt', 'skipped'),
    ];
    const plan = planReplay(branches, timeline, 'charge', 7);
    expect(plan.run).toEqual(['charge', 'receipt']);
    expect(plan.reused).toEqual(['start', 'left', 'right', 'audit']);
    expect(plan.skipped).toEqual([]);
    // Whole outputs where a node that runs reads them; the others only as far as they route the run.
    expect(plan.seed).toEqual({ start: null, left: { l: 1 }, right: null, audit: null });
    expect(plan.nodes.find((n) => n.node_id === 'receipt')).toEqual({ node_id: 'receipt', action: 'run', was: 'skipped' });
  });

  it('runs what never finished elsewhere: a node the failure stopped before it started, another failure', () => {
    // charge failed and stopped the run while right was in flight: audit was never reached.
    const timeline = [row('start', 'success'), row('left', 'success'), row('right', 'failed'), row('charge', 'failed'), row('receipt', 'skipped')];
    const plan = planReplay(branches, timeline, 'charge', 7);
    expect(plan.run).toEqual(['charge', 'receipt', 'right', 'audit']);
    expect(plan.reused).toEqual(['start', 'left']);
    expect(plan.nodes.find((n) => n.node_id === 'audit')!.was).toBe('not_run');
  });

  it('keeps a reused condition’s branch: nodes only the branch not taken leads to stay skipped', () => {
    const graph: Graph = {
      nodes: [node('check', 'condition'), node('yes', 'http_request'), node('no'), node('after')],
      edges: [
        { from: 'check', to: 'yes', branch: 'true' },
        { from: 'check', to: 'no', branch: 'false' },
        { from: 'no', to: 'after' },
      ],
    };
    const plan = planReplay(
      graph,
      [row('check', 'success', { result: false }), row('yes', 'skipped'), row('no', 'success', 1), row('after', 'failed')],
      'after',
      1,
    );
    expect(plan).toMatchObject({ run: ['after'], reused: ['check', 'no'], skipped: ['yes'] });
  });

  it('reuses a failure its node handed to its error edges, and keeps the branch it did not take skipped', () => {
    const graph: Graph = {
      nodes: [node('pay', 'http_request', { on_error: 'branch' }), node('ship'), node('notify'), node('close')],
      edges: [
        { from: 'pay', to: 'ship' },
        { from: 'pay', to: 'notify', branch: 'error' },
        { from: 'notify', to: 'close' },
      ],
    };
    const failure = { error: { code: 'http_error', message: 'HTTP 402', data: { status: 402 } } };
    const timeline = [row('pay', 'failed', failure), row('ship', 'skipped'), row('notify', 'success', 'told'), row('close', 'failed')];
    const plan = planReplay(graph, timeline, 'close', 1);
    expect(plan).toMatchObject({ run: ['close'], reused: ['pay', 'notify'], skipped: ['ship'], seedErrors: ['pay'] });
    expect(plan.seed.pay).toBeNull(); // nothing that runs reads it; its routing is seedErrors'
    // A failure without its handled output (it stopped the run) is not reused: it runs.
    expect(planReplay(graph, [row('pay', 'failed'), row('notify', 'success')], 'notify', 1).run).toEqual(['pay', 'ship', 'notify', 'close']);
  });

  it('refuses a node that did not run', () => {
    const timeline = [row('start', 'success'), row('left', 'success'), row('charge', 'failed'), row('receipt', 'skipped')];
    expect(() => planReplay(branches, timeline, 'receipt', 7)).toThrow(expect.objectContaining({ code: 'node_not_run', status: 409 }));
    expect(() => planReplay(branches, timeline, 'audit', 7)).toThrow('Node audit did not run in execution 7 (never reached)');
  });
});

describe('whether a reset is the replay', () => {
  it('only when the nodes it keeps are exactly the reused ones', () => {
    expect(resetKeepsPlan({ reused: ['a', 'b'] }, ['b', 'a'])).toBe(true);
    expect(resetKeepsPlan({ reused: ['a', 'b'] }, ['a'])).toBe(false);
    expect(resetKeepsPlan({ reused: ['a'] }, ['a', 'x'])).toBe(false);
  });
});

describe('the seed of a replay', () => {
  it('keeps every output whole when a node that runs reads nodes in a way that cannot be told', () => {
    const graph: Graph = {
      nodes: [node('a'), { ...node('b'), config: { value: '{{ $keys(nodes) }}' } }],
      edges: [{ from: 'a', to: 'b' }],
    };
    expect(planReplay(graph, [row('a', 'success', { big: 'x' }), row('b', 'failed')], 'b', 1).seed).toEqual({ a: { big: 'x' } });
  });
});
