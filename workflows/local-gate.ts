/**
 * A local activity's result reaches a run when it completes if the run goes on live, but at once,
 * in the order the activities were scheduled, when a worker replays the run from its history
 * (after a restart, or once the run left the worker's cache, as a long delay makes it). A graph
 * run whose next commands depend on which of its parallel local activities finished first (a
 * timer, a regular activity or a child started while other local nodes still run) would then
 * issue them in another order on replay and fail with a nondeterminism error.
 *
 * The gate makes the order one: while any local activity it runs is in flight, it holds every
 * result it was given (local or not), and when the last one lands it releases them all, in the
 * order they were asked for. Live and on replay the run then sees the same results in the same
 * order at the same point, so it issues the same commands. Pure: no Temporal API, unit tested in
 * local-gate.test.ts.
 */
export class LocalGate {
  private inFlight = 0;
  private asked = 0;
  private held: { order: number; release: () => void }[] = [];

  /** Runs a local activity through the gate. */
  local<T>(start: () => Promise<T>): Promise<T> {
    this.inFlight++;
    return this.hold(start(), () => this.inFlight--);
  }

  /** Awaits anything else through the gate (a regular activity, a child, a timer). */
  other<T>(start: () => Promise<T>): Promise<T> {
    return this.hold(start(), () => undefined);
  }

  private hold<T>(promise: Promise<T>, landed: () => void): Promise<T> {
    const order = this.asked++;
    return new Promise<T>((resolve, reject) => {
      const settle = (release: () => void) => {
        landed();
        this.held.push({ order, release });
        if (this.inFlight === 0) this.releaseAll();
      };
      promise.then(
        (value) => settle(() => resolve(value)),
        (err: unknown) => settle(() => reject(err)),
      );
    });
  }

  private releaseAll(): void {
    const held = this.held.sort((a, b) => a.order - b.order);
    this.held = [];
    for (const h of held) h.release();
  }
}

/** How a node's workflow code awaits: through its run's gate, or directly for runs begun before it. */
export interface NodeAwaits {
  /** A local activity. */
  local<T>(start: () => Promise<T>): Promise<T>;
  /** Anything else: a regular activity, a child, a timer, a condition. */
  other<T>(start: () => Promise<T>): Promise<T>;
  /**
   * A wait that carries nothing (for a signal or a timer): the node gives its place among the
   * run's nodes in flight back while it lasts, and takes one again before it goes on.
   */
  pause<T>(wait: () => Promise<T>): Promise<T>;
  /** Answer outputs by reference when larger (set for runs that keep large values out of history). */
  inlineBytes?: number;
}
