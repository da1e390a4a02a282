import { describe, expect, it } from 'vitest';
import { EarlyClaims } from './early-claims.js';

describe('claims made ahead of a run’s first call', () => {
  it('are taken once, by the run and node they were made for', async () => {
    const claims = new EarlyClaims<string>();
    claims.offer('run-1', 'get', Promise.resolve('claimed'));
    expect(claims.take('run-2', 'get')).toBeUndefined();
    expect(claims.take('run-1', 'other')).toBeUndefined();
    await expect(claims.take('run-1', 'get')).resolves.toBe('claimed');
    // A retry of the call counts its own attempt.
    expect(claims.take('run-1', 'get')).toBeUndefined();
    expect(claims.size).toBe(0);
  });

  it('hand a failed claim to its taker without failing the process', async () => {
    const claims = new EarlyClaims<string>();
    const unhandled: unknown[] = [];
    const listener = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', listener);
    try {
      claims.offer('run-1', 'get', Promise.reject(new Error('the database went away')));
      await new Promise((resolve) => setTimeout(resolve, 10));
      await expect(claims.take('run-1', 'get')).rejects.toThrow('the database went away');
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', listener);
    }
  });

  it('are forgotten when nobody took them for a while, the oldest first', () => {
    let now = 0;
    const claims = new EarlyClaims<string>(1_000, () => now);
    claims.offer('run-1', 'get', Promise.resolve('one'));
    now = 600;
    claims.offer('run-2', 'get', Promise.resolve('two'));
    now = 1_200;
    claims.offer('run-3', 'get', Promise.resolve('three'));
    expect(claims.size).toBe(2);
    expect(claims.take('run-1', 'get')).toBeUndefined();
    expect(claims.take('run-2', 'get')).toBeDefined();
  });
});
