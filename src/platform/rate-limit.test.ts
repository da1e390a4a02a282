import { describe, expect, it } from 'vitest';
import { storedBucket } from './rate-limit.js';

/** The column that holds a bucket's name (rate_limit_windows.bucket) takes 300 characters. */
const COLUMN = 300;

describe('rate-limit bucket names', () => {
  it('keeps a short printable name readable, with its window length', () => {
    expect(storedBucket('login:ada:203.0.113.5', 900)).toBe('login:ada:203.0.113.5@900');
    // A 60 s and a 900 s window of the same name count apart.
    expect(storedBucket('test:window', 60)).not.toBe(storedBucket('test:window', 900));
  });

  it('stores a long or non-ASCII name under a digest that fits the column', () => {
    for (const name of ['login:' + 'x'.repeat(5000), 'login:José:10.0.0.1', 'login:\u0000\n:1', 'login:' + '😀'.repeat(300)]) {
      const stored = storedBucket(name, 900);
      expect(stored.length, name.slice(0, 20)).toBeLessThanOrEqual(COLUMN);
      expect(stored).toMatch(/^[\x20-\x7e]+#[0-9a-f]{64}$/);
      // The same name always lands in the same bucket.
      expect(storedBucket(name, 900)).toBe(stored);
    }
  });

  it('never lets two names share a bucket through the digest', () => {
    const long = 'license:' + 'a'.repeat(300);
    expect(storedBucket(long + 'b', 60)).not.toBe(storedBucket(long + 'c', 60));
    // Two names whose unprintable characters read alike still differ.
    expect(storedBucket('login:é', 60)).not.toBe(storedBucket('login:è', 60));
    // A name that reads like another's digest form is itself digested or kept apart.
    const digested = storedBucket(long, 60);
    expect(storedBucket(digested, 60)).not.toBe(digested);
  });
});
