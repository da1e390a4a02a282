// The small in-memory caches of the activity workers: they keep a worker's heap flat however many
// runs pass through it. Pure, so they are unit tested on their own.

/** A string-keyed map that holds a bounded number of entries; subclasses say what gives way. */
abstract class BoundedMap<V> {
  protected readonly entries = new Map<string, V>();
  constructor(readonly limit: number) {}

  get size(): number {
    return this.entries.size;
  }

  get(key: string): V | undefined {
    return this.entries.get(key);
  }

  set(key: string, value: V): void {
    this.makeRoom();
    this.entries.set(key, value);
  }

  /** Called before each new entry. */
  protected abstract makeRoom(): void;
}

/** A map that forgets everything once it holds more than `limit` entries: for what is needed only while in use. */
export class ForgetfulMap<V> extends BoundedMap<V> {
  protected makeRoom(): void {
    if (this.entries.size > this.limit) this.entries.clear();
  }
}

/** A map that drops its oldest entry before it would hold more than `limit`: for what never changes once stored. */
export class OldestFirstMap<V> extends BoundedMap<V> {
  protected makeRoom(): void {
    if (this.entries.size >= this.limit) this.entries.delete(this.entries.keys().next().value!);
  }
}
