import type { Ledger } from './harness.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One client request of the steady load: its key and every execution id an answer gave it. */
export interface LoadRequest {
  key: string;
  ids: Set<number>;
  attempts: number;
  /** Which APIs answered it (1 or 2), in order. */
  answeredBy: number[];
  startedAt: number;
}

/**
 * A steady stream of workflow runs through both APIs while faults happen. Each request is a client
 * doing what the API asks of one: it sends an Idempotency-Key and, when its API answers 503 or
 * does not answer at all, retries with the same key on the other API until it gets its run.
 */
export class LoadRunner {
  readonly requests: LoadRequest[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private ticker?: NodeJS.Timeout;
  private retrying = true;
  private n = 0;

  constructor(
    private readonly urls: string[],
    private readonly authorization: string,
    private readonly workflowId: number,
    private readonly ledger: Ledger,
    private readonly rate: number,
  ) {}

  start(): void {
    this.ticker = setInterval(() => this.fire(), 1000 / this.rate);
  }

  /** Stops sending new requests and waits for the ones retrying (they give up after `giveUpMs`). */
  async stop(giveUpMs = 60_000): Promise<void> {
    clearInterval(this.ticker);
    const giveUp = setTimeout(() => (this.retrying = false), giveUpMs);
    while (this.inFlight.size) await Promise.all([...this.inFlight]);
    clearTimeout(giveUp);
  }

  /** Requests started at or after `at` that got their run. */
  acceptedSince(at: number): LoadRequest[] {
    return this.requests.filter((r) => r.startedAt >= at && r.ids.size > 0);
  }

  private fire(): void {
    const n = ++this.n;
    const request: LoadRequest = { key: `cluster-load-${n}`, ids: new Set(), attempts: 0, answeredBy: [], startedAt: Date.now() };
    this.requests.push(request);
    const body = JSON.stringify({ payload: { n } });
    let api = n % this.urls.length;
    const p = (async () => {
      while (this.retrying) {
        request.attempts++;
        const path = `/api/workflow/v1/workflows/${this.workflowId}/run`;
        const entry = { api: api + 1, at: Date.now(), method: 'POST', path, status: 0, window: this.ledger.window } as Parameters<Ledger['record']>[0];
        this.ledger.record(entry);
        try {
          const res = await fetch(`${this.urls[api]}${path}`, {
            method: 'POST',
            headers: { authorization: this.authorization, 'content-type': 'application/json', 'idempotency-key': request.key },
            body,
            signal: AbortSignal.timeout(15_000),
          });
          entry.status = res.status;
          const json = (await res.json().catch(() => ({}))) as { data?: { execution_id?: number; dependency?: string }; error?: string };
          if (res.status < 300 && typeof json.data?.execution_id === 'number') {
            request.ids.add(json.data.execution_id);
            request.answeredBy.push(api + 1);
            this.ledger.accept(json.data.execution_id, `load ${request.key}`);
            return;
          }
          entry.error = `${json.error}${json.data?.dependency ? ` (${json.data.dependency})` : ''}`;
          if (res.status !== 503) return; // a refusal a retry would not change
        } catch (err) {
          entry.error = (err as Error).name === 'TimeoutError' ? 'hang' : (err as Error).message;
        } finally {
          entry.window ??= this.ledger.window;
        }
        api = (api + 1) % this.urls.length;
        await sleep(500);
      }
    })();
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }
}
