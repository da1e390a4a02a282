/**
 * Places for what the API makes ahead of a run's first call (its claim, its first attempt), kept
 * by the run's Temporal workflow id for the node they were made for, until that node's activity
 * takes them. A place is reserved before the run is started and filled once Temporal has
 * answered, so a taker that comes first waits for it; it is taken at most once, and forgotten
 * after `forgetAfterMs` when nobody takes it.
 */
export class AheadPlaces<T> {
  /** By Temporal workflow id, oldest first (a Map keeps the order things were put in). */
  private readonly places = new Map<string, { nodeId: string; made: Promise<T | undefined>; at: number }>();

  constructor(
    private readonly forgetAfterMs: number,
    private readonly now: () => number,
  ) {}

  /** A place for `nodeId` of `temporalWorkflowId`'s run. Answers the function that fills it; filled with nothing, the place is let go. */
  reserve(temporalWorkflowId: string, nodeId: string): (made?: T) => void {
    let fill!: (made?: T) => void;
    const made = new Promise<T | undefined>((resolve) => (fill = resolve));
    const now = this.now();
    for (const [id, place] of this.places) {
      if (now - place.at < this.forgetAfterMs) break;
      this.places.delete(id);
    }
    const place = { nodeId, made, at: now };
    this.places.set(temporalWorkflowId, place);
    return (value) => {
      if (value === undefined && this.places.get(temporalWorkflowId) === place) this.places.delete(temporalWorkflowId);
      fill(value);
    };
  }

  /** What the place of `temporalWorkflowId`'s run and `nodeId` is filled with, once; undefined when there is no such place. */
  take(temporalWorkflowId: string, nodeId: string): Promise<T | undefined> | undefined {
    const place = this.places.get(temporalWorkflowId);
    if (!place || place.nodeId !== nodeId) return undefined;
    this.places.delete(temporalWorkflowId);
    return place.made;
  }

  get size(): number {
    return this.places.size;
  }
}
