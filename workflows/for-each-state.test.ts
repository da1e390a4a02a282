import { describe, expect, it } from 'vitest';
import { FOR_EACH_HISTORY_EVENTS } from './defs.js';
import { LoopProgress, bodySink, bodyWeight, itemBoundsOf, nearHistoryLimit } from './for-each-state.js';

const bounds = { inlineBytes: 16 * 1024, contextBytes: 32 * 1024, maxRunning: 32 };

describe('itemBoundsOf', () => {
  it('keeps a graph’s bounds while the loop has no more places than maxRunning', () => {
    expect(itemBoundsOf(bounds, 10)).toEqual({ ...bounds, places: 32 });
  });

  it('shares them among more items in flight, so one workflow task carries no more than a graph’s', () => {
    const shared = itemBoundsOf(bounds, 100);
    expect(shared.places).toBe(100);
    expect(shared.places * (shared.inlineBytes + shared.contextBytes)).toBeLessThanOrEqual(bounds.maxRunning * (bounds.inlineBytes + bounds.contextBytes));
    expect(shared.maxRunning).toBe(32);
  });
});

describe('nearHistoryLimit', () => {
  const fresh = { historyLength: 10, continueAsNewSuggested: false };
  it('always lets a run that has started nothing start one item', () => {
    expect(nearHistoryLimit({ historyLength: 9_000, continueAsNewSuggested: true }, 0, 500, 0)).toBe(false);
  });
  it('stops when Temporal suggests continuing as new', () => {
    expect(nearHistoryLimit({ historyLength: 10, continueAsNewSuggested: true }, 3, 1, 5)).toBe(true);
  });
  it('stops once the items in flight could take the history past its budget', () => {
    expect(nearHistoryLimit(fresh, 10, 1, 10)).toBe(false);
    expect(nearHistoryLimit({ historyLength: FOR_EACH_HISTORY_EVENTS - 500, continueAsNewSuggested: false }, 100, 1, 100)).toBe(true);
    expect(nearHistoryLimit(fresh, 2, 500, 2)).toBe(true);
  });
});

describe('bodyWeight and bodySink', () => {
  it('weighs a body by its nodes, loops and child runs heavier', () => {
    expect(bodyWeight({ nodes: [{ type: 'transform' }, { type: 'for_each' }, { type: 'run_workflow' }] })).toBe(6);
    expect(bodyWeight(undefined)).toBe(2);
  });
  it('takes output_node, or the one node no edge leaves', () => {
    const nodes = [{ id: 'a' }, { id: 'b' }];
    expect(bodySink({ nodes, edges: [{ from: 'a' }] })).toBe('b');
    expect(bodySink({ nodes, edges: [], output_node: 'a' })).toBe('a');
  });
});

describe('LoopProgress', () => {
  it('hands out loaded items in order, and knows when none are left', () => {
    const p = new LoopProgress<number>(-1, undefined);
    p.loaded([{ index: 0, item: 'a' }, { index: 1 }], 2);
    expect(p.after).toBe(1);
    expect(p.exhausted).toBe(false);
    expect(p.next()).toEqual({ index: 0, item: 'a', inline: true });
    expect(p.next()).toEqual({ index: 1, inline: false });
    expect(p.startedUpTo).toBe(1);
    p.loaded([], 2);
    expect(p.done).toBe(true);
  });

  it('keeps the first failure when the loop stops at failures, and only marks the run partial otherwise', () => {
    const stop = new LoopProgress<number>(4, { partial: false });
    stop.failed({ index: 5, code: 'http_error', message: 'a' }, false);
    stop.failed({ index: 6, code: 'http_error', message: 'b' }, false);
    expect(stop.outcome.failure?.index).toBe(5);
    const go = new LoopProgress<number>(-1, undefined);
    go.failed({ index: 1, code: 'x', message: 'y' }, true);
    expect(go.outcome).toEqual({ partial: true });
  });

  it('takes the results to record out at once', () => {
    const p = new LoopProgress<number>(-1, undefined);
    p.results.push(1, 2);
    expect(p.take()).toEqual([1, 2]);
    expect(p.results).toEqual([]);
  });
});
