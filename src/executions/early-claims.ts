import { AheadPlaces } from './ahead-places.js';

/**
 * Claims of runs' records made ahead of their first call, by the API process that started the
 * runs eagerly, for its own worker to take.
 *
 * A run's first short call is counted in its record before the call is made, in the statement that
 * claims the record (ExecutionMirror.claim). The run's node activity makes that statement when it
 * begins, after the run's first workflow task has been created and activated in the workflow
 * sandbox, and the call waits for it. When the API and the worker share a process and the API
 * starts a run through the worker's own connection (eager start), it knows, for a graph whose one
 * root is a short call, which node the run's first task starts: it makes the same statement while
 * Temporal answers the start (one binding no run: ExecutionMirror.claim with no run id), and
 * leaves it here. The node's attempt takes it instead of claiming (its activity's, or the attempt
 * the API runs ahead of the activity: see EarlyRuns): one claim and one counted attempt per
 * execution of the activity.
 *
 * The API reserves the claim's place before it asks Temporal to start the run, and fills it once
 * Temporal has answered: the answer and the run's first task reach the process together, so the
 * activity may ask before the API has heard, and then waits for it. A place is taken at most
 * once, by the run and node it was made for: a retry of the call in the same task, or a run a
 * worker takes again after a crash (whose process holds no claim of the API's), counts its
 * attempt itself. A place left empty (the start failed: the API takes back the attempt it
 * counted) or a claim that failed is the taker's to claim itself. A claim nobody takes (the run
 * was cancelled before its node began; the worker gave its task up and another worker ran it,
 * counting the attempt again) is forgotten after `forgetAfterMs`.
 */
export class EarlyClaims<Claim> {
  private readonly places: AheadPlaces<Made<Claim>>;

  constructor(forgetAfterMs = 5 * 60_000, now: () => number = Date.now) {
    this.places = new AheadPlaces(forgetAfterMs, now);
  }

  /**
   * A place for the claim of the record of `temporalWorkflowId`'s run with `nodeId`'s first
   * attempt counted, before the run is started. Answers the function that fills it: with the
   * run's id and the claim, or with nothing when no claim is made.
   */
  reserve(temporalWorkflowId: string, nodeId: string): (made?: Made<Claim>) => void {
    const fill = this.places.reserve(temporalWorkflowId, nodeId);
    return (claimed) => {
      // Its failure is the taker's to handle (it claims itself), never the process's.
      claimed?.claim.catch(() => undefined);
      fill(claimed);
    };
  }

  /**
   * The claim made for `temporalWorkflowId`'s run `runId` and `nodeId`, once, waiting for the API
   * to fill its place; undefined when there is no place for them, and resolving to undefined when
   * the API made no claim for this run.
   */
  take(temporalWorkflowId: string, runId: string, nodeId: string): Promise<Claim | undefined> | undefined {
    return this.places.take(temporalWorkflowId, nodeId)?.then((made) => (made?.runId === runId ? made.claim : undefined));
  }

  /** How many places wait to be taken (for tests). */
  get size(): number {
    return this.places.size;
  }
}

/** A claim the API made: for which run, and the statement's answer. */
export interface Made<Claim> {
  runId: string;
  claim: Promise<Claim | undefined>;
}
