import { describe, expect, it } from 'vitest';
import { waitDeadline } from './patiently.js';

describe('how long an activity waits out a database outage', () => {
  it('stops two seconds before its start-to-close timeout', () => {
    expect(waitDeadline({ startToCloseTimeoutMs: 60_000, currentAttemptScheduledTimestampMs: 1_000_000 }, 1_005_000)).toBe(1_058_000);
  });

  it('waits thirty seconds less two from now without a timeout', () => {
    expect(waitDeadline({ startToCloseTimeoutMs: undefined, currentAttemptScheduledTimestampMs: 1_000_000 }, 2_000_000)).toBe(2_028_000);
    expect(waitDeadline({ startToCloseTimeoutMs: 0, currentAttemptScheduledTimestampMs: 1_000_000 }, 2_000_000)).toBe(2_028_000);
  });
});
