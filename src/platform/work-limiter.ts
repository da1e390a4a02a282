import type { AppError } from './errors.js';

/**
 * Runs at most `concurrency` jobs at once; the rest wait their turn in arrival order. When
 * `maxWaiting` jobs already wait, a new one is refused with `busy()` (a 503 with Retry-After, say)
 * instead of queueing without end: a flood then costs neither memory nor unbounded waits.
 */
export class WorkLimiter {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(
    private readonly concurrency: number,
    private readonly maxWaiting: number,
    private readonly busy: () => AppError,
  ) {}

  async run<T>(job: () => Promise<T>): Promise<T> {
    if (this.running >= this.concurrency) {
      if (this.waiting.length >= this.maxWaiting) {
        throw this.busy();
      }
      await new Promise<void>((resume) => this.waiting.push(resume));
    } else {
      this.running++;
    }
    try {
      return await job();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }
}
