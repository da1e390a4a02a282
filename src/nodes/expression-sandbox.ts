import { Worker } from 'node:worker_threads';
import { ExpressionError, hasTemplates, type ExpressionContext } from './expressions.js';
import type { SchemaErrors } from '../approvals/editable-fields.js';

/**
 * An expression used more time or memory than an expression may: the node error
 * `expression_limit` (never retried: the same expression on the same data does the same).
 */
export class ExpressionLimitError extends Error {
  readonly code = 'expression_limit';
  constructor(message: string) {
    super(message);
    this.name = 'ExpressionLimitError';
  }
}

export interface SandboxLimits {
  /** Threads evaluating at once. */
  threads: number;
  /** How long one node's templates may take, from the moment a thread starts on them. */
  timeoutMs: number;
  /** Heap of one thread, in MiB. */
  memoryMb: number;
  /**
   * Largest evaluated configuration (about its size as JSON): it is stored as the node's input and
   * sent back to the main thread, so a bigger one is refused in the thread.
   */
  resultBytes: number;
}

interface Job {
  id: number;
  template: unknown;
  /** A bare JSONata expression (no `{{ }}`), evaluated instead of the template. */
  expression?: string;
  /** A JSON Schema check instead (an approval's `editable` schema, whose patterns are an author's). */
  schemaCheck?: { schema: unknown; value: unknown };
  context: ExpressionContext;
  resolve(value: unknown): void;
  reject(err: Error): void;
}

interface Slot {
  worker: Worker;
  /** The thread has loaded and listens (it says so once). */
  ready: boolean;
  job?: Job;
  timer?: NodeJS.Timeout;
}

const workerUrl = new URL('./expression.worker.mjs', import.meta.url);

/**
 * Evaluates workflow expressions (JSONata in `{{ }}`) on worker threads, so that what an author
 * writes can never stall the process: a thread that passes its deadline is terminated (which
 * stops even a single long built-in, such as a regular expression that backtracks without end),
 * a thread that outgrows its heap dies alone, and both end the evaluation with
 * ExpressionLimitError. The main thread's event loop, which serves the API and the worker's other
 * activities, only ever posts a message and waits. Threads start on first use and are replaced
 * when one is terminated; templates without `{{ }}` never leave the main thread.
 */
export class ExpressionSandbox {
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private nextId = 1;
  private closed = false;

  constructor(private readonly limits: SandboxLimits) {}

  /** Resolves a JSON template against a run's context (see expressions.ts for the template rules). */
  resolve(template: unknown, context: ExpressionContext): Promise<unknown> {
    if (!hasTemplates(template)) return Promise.resolve(template);
    return this.enqueue({ template }, context);
  }

  /** Evaluates one bare JSONata expression (no `{{ }}` around it) against a context, with the same limits. */
  evaluate(expression: string, context: ExpressionContext): Promise<unknown> {
    return this.enqueue({ template: null, expression }, context);
  }

  /**
   * Checks `value` against a JSON Schema (draft 2020-12, with formats) on a sandbox thread, under
   * the same time and memory limits: a schema's `pattern` is a regular expression its author wrote,
   * which may backtrack for hours on a short value. Answers Ajv's errors, or null when it holds;
   * ExpressionLimitError past the limits.
   */
  validateSchema(schema: unknown, value: unknown): Promise<SchemaErrors> {
    return this.enqueue(
      { template: null, schemaCheck: { schema, value } },
      { trigger: null, nodes: {}, execution: { id: 0, workflow_id: 0 } },
    ) as Promise<SchemaErrors>;
  }

  private enqueue(what: { template: unknown; expression?: string; schemaCheck?: Job['schemaCheck'] }, context: ExpressionContext): Promise<unknown> {
    if (this.closed) return Promise.reject(new Error('The expression sandbox is closed'));
    return new Promise((resolve, reject) => {
      this.queue.push({ id: this.nextId++, ...what, context, resolve, reject });
      this.dispatch();
    });
  }

  private spawn(): Slot {
    const worker = new Worker(workerUrl, {
      resourceLimits: { maxOldGenerationSizeMb: this.limits.memoryMb, maxYoungGenerationSizeMb: Math.max(4, Math.round(this.limits.memoryMb / 8)) },
      // Nothing of the service's environment (keys, database addresses) is the thread's business.
      env: {},
      stdout: true,
      stderr: true,
    });
    worker.unref();
    const slot: Slot = { worker, ready: false };
    worker.on('message', (answer: { ready?: true; id: number; ok: boolean; value?: unknown; message?: string; limit?: boolean; position?: number }) => {
      if (answer.ready) {
        slot.ready = true;
        this.dispatch();
        return;
      }
      const job = slot.job;
      if (!job || job.id !== answer.id) return;
      this.settle(slot);
      const message = answer.message ?? 'Expression failed';
      if (answer.ok) job.resolve(answer.value);
      else job.reject(answer.limit ? new ExpressionLimitError(message) : new ExpressionError(message, '', answer.position));
      this.dispatch();
    });
    worker.on('error', (err: Error & { code?: string }) => {
      const job = slot.job;
      const started = slot.ready;
      this.retire(slot);
      // A thread that cannot even start would fail every job: they are refused, not retried forever.
      if (!started)
        for (const queued of this.queue.splice(0)) queued.reject(new ExpressionError(`The expression sandbox could not start a thread: ${err.message}`, ''));
      if (job) {
        job.reject(
          err.code === 'ERR_WORKER_OUT_OF_MEMORY'
            ? new ExpressionLimitError(`The node's expressions used more than ${this.limits.memoryMb} MiB of memory`)
            : new ExpressionError(`Expression evaluation failed: ${err.message}`, ''),
        );
      }
      this.dispatch();
    });
    worker.on('exit', () => {
      // An exit nobody asked for (a crash): the job goes with the thread.
      if (this.slots.includes(slot)) {
        const job = slot.job;
        this.retire(slot);
        job?.reject(new ExpressionError('Expression evaluation stopped unexpectedly', ''));
        this.dispatch();
      }
    });
    this.slots.push(slot);
    return slot;
  }

  private settle(slot: Slot): void {
    clearTimeout(slot.timer);
    slot.timer = undefined;
    slot.job = undefined;
  }

  /** Takes a thread out of the pool for good (it is terminated when still running). */
  private retire(slot: Slot): void {
    clearTimeout(slot.timer);
    const at = this.slots.indexOf(slot);
    if (at >= 0) this.slots.splice(at, 1);
    slot.job = undefined;
    void slot.worker.terminate().catch(() => undefined);
  }

  private dispatch(): void {
    while (this.queue.length && !this.closed) {
      const idle = this.slots.find((s) => s.ready && !s.job);
      if (!idle) {
        // A thread still starting takes the next job once ready; start one more if the pool may.
        const starting = this.slots.filter((s) => !s.ready).length;
        if (this.slots.length < this.limits.threads && starting < this.queue.length) this.spawn();
        return;
      }
      const slot = idle;
      const job = this.queue.shift()!;
      slot.job = job;
      slot.timer = setTimeout(() => {
        // Past the deadline: terminating the thread stops the evaluation wherever it is.
        this.retire(slot);
        job.reject(
          new ExpressionLimitError(
            job.schemaCheck
              ? `The check against the JSON Schema ran longer than ${this.limits.timeoutMs} ms`
              : `The node's expressions ran longer than ${this.limits.timeoutMs} ms`,
          ),
        );
        this.dispatch();
      }, this.limits.timeoutMs);
      try {
        const { timeoutMs, resultBytes } = this.limits;
        slot.worker.postMessage({
          id: job.id,
          template: job.template,
          expression: job.expression,
          schemaCheck: job.schemaCheck,
          context: job.context,
          timeoutMs,
          resultBytes,
        });
      } catch (err) {
        // The context holds something that is not plain data; such a run cannot be evaluated.
        this.settle(slot);
        job.reject(new ExpressionError(`The run's data cannot be evaluated: ${(err as Error).message}`, ''));
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) job.reject(new Error('The expression sandbox is closed'));
    await Promise.all(this.slots.splice(0).map((s) => (clearTimeout(s.timer), s.worker.terminate().catch(() => undefined))));
  }
}
