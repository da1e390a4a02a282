/**
 * Places shared by several schedulers: the items of a loop in flight together each run their
 * body's graph, and all their nodes in flight at once must stay within Temporal's limit of
 * pending activities and children of one run (2,000), and within what one workflow task may
 * carry. A scheduler takes a place to start a node and gives it back when the node ends; one that
 * found none waits for `freed()`. Pure: no Temporal API, unit tested in slots.test.ts.
 */
export class Slots {
  private free: number;
  private waiters: (() => void)[] = [];

  constructor(size: number) {
    this.free = size;
  }

  take(): boolean {
    if (this.free <= 0) return false;
    this.free--;
    return true;
  }

  /** Gives a place back and wakes every waiter, in the order they began to wait. */
  release(): void {
    this.free++;
    for (const wake of this.waiters.splice(0)) wake();
  }

  /** Resolves the next time a place is given back. */
  freed(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  get available(): number {
    return this.free;
  }
}
