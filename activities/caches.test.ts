import { describe, expect, it } from 'vitest';
import { ForgetfulMap, OldestFirstMap } from './caches.js';

describe('ForgetfulMap (the runs in flight of a worker)', () => {
  it('keeps entries up to one past its limit, then starts afresh', () => {
    const runs = new ForgetfulMap<number>(2);
    runs.set('a', 1);
    runs.set('b', 2);
    runs.set('c', 3);
    expect([runs.get('a'), runs.get('b'), runs.get('c'), runs.size]).toEqual([1, 2, 3, 3]);
    runs.set('d', 4);
    expect([runs.get('a'), runs.get('c'), runs.get('d'), runs.size]).toEqual([undefined, undefined, 4, 1]);
  });
});

describe('OldestFirstMap (stored workflow versions)', () => {
  it('drops the oldest entry to make room, and keeps the rest', () => {
    const versions = new OldestFirstMap<string>(2);
    versions.set('1:1', 'v1');
    versions.set('1:2', 'v2');
    expect(versions.size).toBe(2);
    versions.set('2:1', 'w1');
    expect([versions.get('1:1'), versions.get('1:2'), versions.get('2:1'), versions.size]).toEqual([undefined, 'v2', 'w1', 2]);
  });
});
