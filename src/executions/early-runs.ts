import { isDeepStrictEqual } from 'node:util';
import { AheadPlaces } from './ahead-places.js';

/** Runs a node's first attempt for a run whose local activity has not started yet. */
export type AheadRunner<Input, Output> = (input: Input, run: { workflowId: string; runId: string }, signal: AbortSignal) => Promise<Output>;

/** An attempt run ahead: for which run, the input it was run with (as the activity will receive it), and its outcome. */
interface Ahead<Output> {
  runId: string;
  expected: unknown;
  outcome: Promise<Output>;
  abort: AbortController;
}

/**
 * The first attempts of runs' first calls, run by the API that started the runs eagerly, ahead of
 * their local activities, for its own worker's activities to take.
 *
 * When the API and the worker share a process and Temporal hands a run's first task straight back
 * with its start, the API knows which node that task starts (a graph whose one root is a short
 * call) and with what input: the run's payload and its first step's answer, both in the run's
 * input, decide it through the same pure steps the workflow code takes. Between Temporal's answer
 * and the node's local activity beginning, the worker's SDK creates the run in the workflow
 * sandbox, activates it and hands the local activity back (about 5 ms on two cores). The API runs
 * the node's attempt at once instead, with the record claimed as the activity would claim it, and
 * leaves its outcome here; the activity, once it begins with the same input, answers that outcome
 * (or throws its failure, for Temporal's retry policy to go on from) rather than making the call.
 *
 * What it changes is when the call is made: one attempt per execution of the activity, counted
 * before the call. A run whose first task this worker never activates (it stops, or stalls past
 * the task's timeout, right after the start) is run by another worker, which makes the call again,
 * as a local activity whose completion was never recorded always is made again. An activity whose
 * input differs from what the API predicted (a defect: both come from the same steps) still
 * answers the attempt made, rather than make the call a second time; the difference is counted
 * in `differed` and told to `onDiffered`.
 *
 * A place is reserved before the start and filled once Temporal has answered, so an activity that
 * begins first waits for it. A place nobody takes is forgotten after `forgetAfterMs`.
 */
export class EarlyRuns<Input, Output> {
  private runner?: AheadRunner<Input, Output>;
  private readonly places: AheadPlaces<Ahead<Output>>;
  /** Outcomes taken by activities given the input predicted, and by activities given another. */
  readonly counts = { taken: 0, differed: 0 };

  constructor(
    /** Told of an activity that took an attempt made with another input than its own. */
    private readonly onDiffered: (temporalWorkflowId: string, nodeId: string) => void = () => undefined,
    forgetAfterMs = 5 * 60_000,
    now: () => number = Date.now,
  ) {
    this.places = new AheadPlaces(forgetAfterMs, now);
  }

  /** The worker of this process runs attempts ahead with `runner` (until then none is). */
  serve(runner: AheadRunner<Input, Output>): void {
    this.runner = runner;
  }

  get serving(): boolean {
    return this.runner !== undefined;
  }

  /**
   * A place for the attempt of `nodeId` in `temporalWorkflowId`'s run, before the run is started.
   * Answers the function that fills it: with the run's id and the node's input (the attempt is
   * made at once), or with nothing when no attempt is made ahead.
   */
  reserve(temporalWorkflowId: string, nodeId: string): (start?: { runId: string; input: Input }) => void {
    const fill = this.places.reserve(temporalWorkflowId, nodeId);
    return (start) => {
      const runner = this.runner;
      if (!start || !runner) return fill();
      const abort = new AbortController();
      // As the activity receives it: through JSON, the payload converter's encoding.
      const expected: unknown = JSON.parse(JSON.stringify(start.input));
      // Run with that copy: the attempt sees exactly the values it is compared by.
      const outcome = Promise.resolve().then(() => runner(expected as Input, { workflowId: temporalWorkflowId, runId: start.runId }, abort.signal));
      // Its failure is the activity's to throw, never the process's.
      outcome.catch(() => undefined);
      fill({ runId: start.runId, expected, outcome, abort });
    };
  }

  /**
   * The attempt run ahead for `temporalWorkflowId`'s run `runId` and `nodeId`, once, waiting for the
   * API to fill its place: undefined when there is no place for them; resolving to undefined when
   * none was run for this run (the activity makes its own attempt), else to its outcome, cancelled
   * with `signal`.
   */
  take(
    temporalWorkflowId: string,
    runId: string,
    nodeId: string,
    input: Input,
    signal: AbortSignal,
  ): Promise<{ outcome: Promise<Output> } | undefined> | undefined {
    return this.places.take(temporalWorkflowId, nodeId)?.then((ahead) => {
      if (!ahead) return undefined;
      if (ahead.runId !== runId) {
        ahead.abort.abort();
        return undefined;
      }
      // The call was made (or is being made) with the input predicted: making it again would be a
      // second side effect nobody asked for, so its outcome stands, and the difference is told.
      if (!isDeepStrictEqual(ahead.expected, input)) {
        this.counts.differed++;
        this.onDiffered(temporalWorkflowId, nodeId);
      } else this.counts.taken++;
      const cancel = () => ahead.abort.abort(signal.reason);
      if (signal.aborted) cancel();
      else {
        signal.addEventListener('abort', cancel, { once: true });
        ahead.outcome.finally(() => signal.removeEventListener('abort', cancel)).catch(() => undefined);
      }
      return { outcome: ahead.outcome };
    });
  }

  /** How many places wait to be taken (for tests). */
  get size(): number {
    return this.places.size;
  }
}
