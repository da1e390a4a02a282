import { describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, nestsDeeperThan, parseBoundedJson } from './json-depth.js';

describe('JSON depth', () => {
  const nested = (depth: number) => JSON.parse('['.repeat(depth) + ']'.repeat(depth)) as unknown;

  it('counts levels of objects and arrays, scalars are no level', () => {
    expect(nestsDeeperThan(1, 0)).toBe(false);
    expect(nestsDeeperThan({}, 0)).toBe(true);
    expect(nestsDeeperThan(nested(3), 3)).toBe(false);
    expect(nestsDeeperThan(nested(4), 3)).toBe(true);
    expect(nestsDeeperThan({ a: [1, { b: 'x' }] }, 3)).toBe(false);
    expect(nestsDeeperThan({ a: [1, { b: {} }] }, 3)).toBe(true);
  });

  it('walks 20,000 levels without overflowing, and refuses them when parsing', () => {
    expect(nestsDeeperThan(nested(20_000))).toBe(true);
    expect(() => parseBoundedJson('{"a":'.repeat(20_000) + '1' + '}'.repeat(20_000))).toThrow(/nests deeper than 100/);
    expect(parseBoundedJson('{"a": [1, 2]}')).toEqual({ a: [1, 2] });
  });
});

describe('the default limit', () => {
  const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

  it('lets MAX_JSON_DEPTH levels through and refuses one more', () => {
    expect(() => parseBoundedJson(nested(MAX_JSON_DEPTH))).not.toThrow();
    expect(() => parseBoundedJson(nested(MAX_JSON_DEPTH + 1))).toThrow(SyntaxError);
  });

  it('counts depth, not size: a wide document of shallow values passes', () => {
    const wide = JSON.stringify(Array.from({ length: 10_000 }, (_, i) => ({ i, tags: [i, [i]] })));
    expect(parseBoundedJson(wide)).toHaveLength(10_000);
  });

  it('leaves malformed JSON to JSON.parse’s own SyntaxError', () => {
    expect(() => parseBoundedJson('{"a":')).toThrow(SyntaxError);
    expect(() => parseBoundedJson('{"a":')).not.toThrow(/nests deeper/);
  });
});
