/**
 * Claims of runs' records made ahead of their first call, by the API process that started the
 * runs eagerly, for its own worker to take.
 *
 * A run's first short call is counted in its record before the call is made, in the statement that
 * claims the record (ExecutionMirror.claim). The run's node activity makes that statement when it
 * begins, after the run's first workflow task has been created and activated in the workflow
 * sandbox, and the call waits for it. When the API and the worker share a process and Temporal
 * hands the run's first task straight back to this worker (eager start), the API knows the run's
 * id and, for a graph whose one root is a short call, which node that task starts first: it makes
 * the same statement at once, while the worker activates the run, and leaves it here. The node's
 * activity takes it instead of claiming: one claim and one counted attempt per execution of the
 * activity, as before.
 *
 * A claim is taken at most once, by the run and node it was made for: a retry of the call in the
 * same task, or a run that a worker takes again after a crash (whose process holds no claim of
 * the API's), counts its attempt itself. A claim that failed is the taker's to make again. A
 * claim nobody takes (the run was cancelled before its node began, or its task went to another
 * worker) is forgotten after `forgetAfterMs`; its attempt stays counted, as one made by a call
 * whose worker died is.
 */
export class EarlyClaims<Claim> {
  /** By run id, oldest first (a Map keeps the order things were put in). */
  private readonly claims = new Map<string, { nodeId: string; claim: Promise<Claim | undefined>; at: number }>();

  constructor(
    private readonly forgetAfterMs = 5 * 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Leaves the claim of `runId`'s record, with `nodeId`'s first attempt counted, for its node's activity. */
  offer(runId: string, nodeId: string, claim: Promise<Claim | undefined>): void {
    // Its failure is the taker's to handle (it claims itself), never the process's.
    claim.catch(() => undefined);
    const now = this.now();
    for (const [id, early] of this.claims) {
      if (now - early.at < this.forgetAfterMs) break;
      this.claims.delete(id);
    }
    this.claims.set(runId, { nodeId, claim, at: now });
  }

  /** The claim made for `runId` and `nodeId`, once; undefined when there is none for them. */
  take(runId: string, nodeId: string): Promise<Claim | undefined> | undefined {
    const early = this.claims.get(runId);
    if (!early || early.nodeId !== nodeId) return undefined;
    this.claims.delete(runId);
    return early.claim;
  }

  /** How many claims wait to be taken (for tests and metrics). */
  get size(): number {
    return this.claims.size;
  }
}
