import { startFakeOpenAi, type FakeProvider } from '../helpers/fake-providers.js';
import { startHttpTarget, type HttpTarget } from '../helpers/http-target.js';

/**
 * Every loopback server the cluster's workers call during the suite, in one place: the HTTP
 * target `http_request` nodes hit (it counts side effects; paths under /slow/ answer after a
 * second, so runs are caught mid-node), and the scripted OpenAI-compatible model of the agent.
 * `egressAllow` names them as the service's outbound allow-list (SVC_EGRESS_ALLOW) would.
 */
export interface Targets {
  http: HttpTarget;
  model: FakeProvider;
  /** `host:port` of each target, comma-separated. */
  egressAllow: string;
  close(): Promise<void>;
}

export const SLOW_MS = 1000;

export async function startTargets(): Promise<Targets> {
  const http = await startHttpTarget((req) => (req.url.startsWith('/slow/') ? { delayMs: SLOW_MS } : undefined));
  const model = await startFakeOpenAi();
  return {
    http,
    model,
    egressAllow: [http.url, model.url].map((u) => new URL(u).host).join(','),
    async close() {
      await Promise.all([http.close(), model.close()]);
    },
  };
}
