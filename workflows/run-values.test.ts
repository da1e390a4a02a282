import { describe, expect, it } from 'vitest';
import { RunValues, utf8Bytes } from './run-values.js';

const bounds = { inlineBytes: 100, contextBytes: 150, maxRunning: 4 };
const node = (value: unknown) => ({ config: { value } });

describe('utf8Bytes', () => {
  it('counts bytes as UTF-8 encodes them', () => {
    for (const text of ['', 'abc', 'é', '€', '😀', 'a€😀é'.repeat(10)]) expect(utf8Bytes(text)).toBe(Buffer.byteLength(text));
  });
});

describe('RunValues without bounds (runs begun before references)', () => {
  it('passes the whole payload and every named output inline, as before', () => {
    const values = new RunValues({ big: 'x'.repeat(1000) }, undefined);
    values.set('a', { output: 'y'.repeat(1000) });
    values.set('b', { output: 2 });
    expect(values.contextFor(node('{{ nodes.a }}'))).toEqual({ trigger: { big: 'x'.repeat(1000) }, nodes: { a: 'y'.repeat(1000) } });
    expect(values.contextFor(node('{{ $lookup(nodes, "b") }}')).nodes).toEqual({ a: 'y'.repeat(1000), b: 2 });
    expect(values.contextFor(node('plain'))).toEqual({ trigger: { big: 'x'.repeat(1000) }, nodes: {} });
    expect(values.lastOutput()).toEqual({ lastOutput: 2 });
  });
});

describe('RunValues with bounds', () => {
  it('gives a node without {{ }} no context at all', () => {
    const values = new RunValues({ a: 1 }, bounds);
    values.set('a', { output: 1 });
    expect(values.contextFor(node('plain'))).toEqual({ trigger: null, nodes: {} });
  });

  it('passes small values inline and large ones, or what does not fit, by reference', () => {
    const values = new RunValues({ small: true }, bounds);
    values.set('ref', { ref: { node: 'ref', bytes: 5000 } });
    values.set('a', { output: 'a'.repeat(80), bytes: 82 });
    values.set('b', { output: 'b'.repeat(80), bytes: 82 });
    const context = values.contextFor(node('{{ nodes.ref }} {{ nodes.a }} {{ nodes.b }} {{ trigger.small }}'));
    expect(context.nodes).toEqual({ a: 'a'.repeat(80) });
    expect(context.refs).toEqual({ nodes: { ref: { node: 'ref', bytes: 5000 }, b: { node: 'b', bytes: 82 } } });
    expect(context.trigger).toEqual({ small: true });
  });

  it('sends a payload larger than inlineBytes, or one kept in the record, by reference', () => {
    const big = new RunValues({ text: 'x'.repeat(200) }, bounds);
    expect(big.contextFor(node('{{ trigger.text }}'))).toEqual({ trigger: null, nodes: {}, refs: { trigger: true } });
    const stored = new RunValues(null, bounds, true);
    expect(stored.contextFor(node('{{ trigger }}'))).toEqual({ trigger: null, nodes: {}, refs: { trigger: true } });
  });

  it('always inlines a value the timeline does not hold as an output', () => {
    const values = new RunValues(null, bounds);
    values.set('failed', { output: { error: { code: 'x', message: 'm'.repeat(300) } } }, { last: false, kept: false });
    const context = values.contextFor(node('{{ nodes.failed.error.code }}'));
    expect(context.nodes.failed).toEqual({ error: { code: 'x', message: 'm'.repeat(300) } });
    expect(context.refs?.nodes).toBeUndefined();
    expect(values.lastOutput()).toEqual({});
  });

  it('answers the last output inline or by reference', () => {
    const values = new RunValues(null, bounds);
    values.set('a', { output: 1, bytes: 1 });
    expect(values.lastOutput()).toEqual({ lastOutput: 1 });
    values.set('b', { ref: { node: 'b', bytes: 999 } });
    expect(values.lastOutput()).toEqual({ lastOutputRef: { node: 'b', bytes: 999 } });
  });
});

describe('RunValues.fork', () => {
  it('shares the trigger and outputs held so far, under the fork’s bounds; its own outputs stay its own', () => {
    const bounds = { inlineBytes: 1024, contextBytes: 1024, maxRunning: 4 };
    const outer = new RunValues({ tag: 't' }, bounds);
    outer.set('a', { output: { v: 1 } });
    const item = outer.fork({ ...bounds, contextBytes: 2048 });
    item.set('b', { output: 2 });
    expect(item.outcome('a')).toMatchObject({ output: { v: 1 } });
    expect(outer.has('b')).toBe(false);
    expect(item.contextFor({ config: { x: '{{ trigger.tag & nodes.a.v & nodes.b }}' } })).toEqual({ trigger: { tag: 't' }, nodes: { a: { v: 1 }, b: 2 } });
  });
});
