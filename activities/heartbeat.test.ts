import { afterEach, describe, expect, it, vi } from 'vitest';
import { withHeartbeat } from './heartbeat.js';

describe('heartbeats around a long activity call', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('beats while the work runs and stops when it settles', async () => {
    vi.useFakeTimers();
    let beats = 0;
    let finish!: (value: string) => void;
    const running = withHeartbeat({ heartbeat: () => beats++ }, () => new Promise<string>((resolve) => (finish = resolve)), 1000);
    await vi.advanceTimersByTimeAsync(3500);
    expect(beats).toBe(3);
    finish('done');
    await expect(running).resolves.toBe('done');
    await vi.advanceTimersByTimeAsync(5000);
    expect(beats).toBe(3);
  });

  it('stops beating when the work fails, and passes the failure on', async () => {
    vi.useFakeTimers();
    let beats = 0;
    const failing = withHeartbeat({ heartbeat: () => beats++ }, () => Promise.reject(new Error('boom')), 1000);
    await expect(failing).rejects.toThrow('boom');
    await vi.advanceTimersByTimeAsync(5000);
    expect(beats).toBe(0);
  });
});
