import { describe, expect, it } from 'vitest';
import { Slots } from './slots.js';

describe('Slots', () => {
  it('gives out at most its size, and takes places back', () => {
    const slots = new Slots(2);
    expect([slots.take(), slots.take(), slots.take()]).toEqual([true, true, false]);
    slots.release();
    expect(slots.available).toBe(1);
    expect(slots.take()).toBe(true);
  });

  it('wakes every waiter when a place is given back, in the order they waited', async () => {
    const slots = new Slots(1);
    slots.take();
    const woken: number[] = [];
    const first = slots.freed().then(() => woken.push(1));
    const second = slots.freed().then(() => woken.push(2));
    slots.release();
    await Promise.all([first, second]);
    expect(woken).toEqual([1, 2]);
  });
});
