import { describe, expect, it } from 'vitest';
import type { Graph } from './defs.js';
import { GraphState, ancestors, findCycle } from './graph.js';
import { contextFor, referencedNodes } from './references.js';

const graph = (nodes: string[], edges: [string, string, string?][]): Graph => ({
  nodes: nodes.map((id) => ({ id, type: 'transform', config: {} })),
  edges: edges.map(([from, to, branch]) => ({ from, to, ...(branch ? { branch } : {}) })),
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
    const node = { id: 'x', type: 'transform', config: { value: '{{ nodes.a }}' } };
    expect(contextFor(node, { a: 1, b: 2 })).toEqual({ a: 1 });
  });
});
