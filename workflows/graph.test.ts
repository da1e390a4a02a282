import { describe, expect, it } from 'vitest';
import type { Graph } from './defs.js';
import { GraphState, ancestors, findCycle } from './graph.js';
import { contextFor, referencedNodes } from './references.js';

const graph = (nodes: string[], edges: [string, string, string?][]): Graph => ({
  nodes: nodes.map((id) => ({ id, type: 'transform', config: {} })),
  edges: edges.map(([from, to, branch]) => ({ from, to, ...(branch ? { branch } : {}) })),
});

describe('GraphState with error edges', () => {
  // pay -(error)-> notify; pay -> ship -> done; notify -> done
  const withErrors = (): Graph => {
    const g = graph(
      ['pay', 'ship', 'notify', 'done'],
      [
        ['pay', 'ship'],
        ['pay', 'notify', 'error'],
        ['ship', 'done'],
        ['notify', 'done'],
      ],
    );
    g.nodes[0]!.on_error = 'branch';
    return g;
  };

  it('a failure takes the error edges and no other', () => {
    const state = new GraphState(withErrors());
    expect(state.ready()).toEqual(['pay']);
    state.fail('pay');
    expect(state.ready()).toEqual(['notify']);
    expect(state.skippedNodes()).toEqual(['ship']);
    state.complete('notify');
    expect(state.ready()).toEqual(['done']);
  });

  it('a success never takes the error edges', () => {
    const state = new GraphState(withErrors());
    state.ready();
    state.complete('pay');
    expect(state.ready()).toEqual(['ship']);
    expect(state.skippedNodes()).toEqual(['notify']);
  });

  it('a success whose output names the branch "error" still does not take the error edges', () => {
    const state = new GraphState(withErrors());
    state.ready();
    state.complete('pay', 'error');
    expect(state.ready()).toEqual(['ship']);
  });

  it('without on_error "branch", an "error" edge is a case like any other', () => {
    const state = new GraphState(graph(['sw', 'e'], [['sw', 'e', 'error']]));
    state.ready();
    state.complete('sw', 'error');
    expect(state.ready()).toEqual(['e']);
  });

  it('a reused failure is seeded into its error edges', () => {
    const state = new GraphState(withErrors());
    state.seedFailure('pay');
    expect(state.ready()).toEqual(['notify']);
    expect(state.skippedNodes()).toEqual(['ship']);
  });
});

describe('GraphState', () => {
  it('starts roots together, then nodes whose inputs are all decided', () => {
    const state = new GraphState(
      graph(
        ['a', 'b', 'c'],
        [
          ['a', 'c'],
          ['b', 'c'],
        ],
      ),
    );
    expect(state.ready()).toEqual(['a', 'b']);
    state.complete('a');
    expect(state.ready()).toEqual([]); // the join waits for b
    state.complete('b');
    expect(state.ready()).toEqual(['c']);
  });

  it('skips the branch not taken, and everything only it leads to', () => {
    const state = new GraphState(
      graph(
        ['if', 'yes', 'no', 'after-no'],
        [
          ['if', 'yes', 'true'],
          ['if', 'no', 'false'],
          ['no', 'after-no'],
        ],
      ),
    );
    expect(state.ready()).toEqual(['if']);
    state.complete('if', 'true');
    expect(state.ready()).toEqual(['yes']);
    expect(state.skippedNodes().sort()).toEqual(['after-no', 'no']);
  });

  it('runs a join when at least one input is live and the others are dead', () => {
    const state = new GraphState(
      graph(
        ['if', 'yes', 'no', 'join'],
        [
          ['if', 'yes', 'true'],
          ['if', 'no', 'false'],
          ['yes', 'join'],
          ['no', 'join'],
        ],
      ),
    );
    state.ready();
    state.complete('if', 'false');
    expect(state.ready()).toEqual(['no']);
    state.complete('no');
    expect(state.ready()).toEqual(['join']);
    expect(state.skippedNodes()).toEqual(['yes']);
  });

  it('treats seeded nodes as done and reports unfinished ones', () => {
    const state = new GraphState(
      graph(
        ['a', 'b', 'c'],
        [
          ['a', 'b'],
          ['b', 'c'],
        ],
      ),
    );
    state.seed('a');
    expect(state.ready()).toEqual(['b']);
    expect(state.unfinished()).toEqual(['b', 'c']);
  });
});

describe('graph helpers', () => {
  it('finds cycles and ancestors', () => {
    expect(findCycle(graph(['a', 'b'], [['a', 'b']]))).toBeUndefined();
    expect(
      findCycle(
        graph(
          ['a', 'b', 'c'],
          [
            ['a', 'b'],
            ['b', 'c'],
            ['c', 'b'],
          ],
        ),
      ),
    ).toEqual(['b', 'c', 'b']);
    expect(
      [
        ...ancestors(
          graph(
            ['a', 'b', 'c', 'd'],
            [
              ['a', 'b'],
              ['b', 'c'],
              ['d', 'c'],
            ],
          ),
          'c',
        ),
      ].sort(),
    ).toEqual(['a', 'b', 'd']);
  });

  it('reads the node outputs an expression names', () => {
    expect(referencedNodes({ a: '{{ nodes.fetch.body.count > nodes.`other-node`.n }}', b: 'plain nodes text' })).toEqual(['fetch', 'other-node']);
    expect(referencedNodes({ a: '{{ $keys(nodes) }}' })).toBeUndefined();
    // Only `nodes` at the start of a path (or after the root $$) is the run's nodes.
    expect(referencedNodes({ a: '{{ trigger.nodes.x & $nodes.y & "nodes.z" & $$.nodes.w & $x and nodes.v }}' })).toEqual(['w', 'v']);
    // A `}}` inside a JSONata object does not end the expression.
    expect(referencedNodes({ a: '{{ {"k": {"n": nodes.deep.n}} }}' })).toEqual(['deep']);
    const node = { id: 'x', type: 'transform', config: { value: '{{ nodes.a }}' } };
    expect(contextFor(node, { a: 1, b: 2 })).toEqual({ a: 1 });
  });
});
