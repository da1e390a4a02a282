import { ApplicationFailure } from '@temporalio/activity';
import { z } from 'zod';
import { HttpCallError, httpCall } from '../connections/http-call.js';
import { EgressDeniedError, ResponseTooLargeError } from '../platform/egress.js';
import type { NodeType } from './node-type.js';
import { CODE } from '../../workflows/error-codes.js';

const methods = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'] as const;
const config = z.strictObject({
  method: z.enum(methods),
  path: z.string().max(4000),
  headers: z.record(z.string(), z.string()).optional(),
  query: z.record(z.string(), z.unknown()).optional(),
  body: z.unknown().optional(),
});
type HttpConfig = z.infer<typeof config>;

/**
 * Calls the connection's base URL. A 429 or 5xx answer is retried under the node's retry
 * policy; any other non-2xx fails the node at once (`http_error`).
 */
export const httpRequestNode: NodeType<HttpConfig> = {
  type: 'http_request',
  pure: false,
  localWhenShort: true,
  needsConnection: true,
  description:
    "config `{method, path, headers?, query?, body?}` against the connection's `base_url` with its credential. Output `{status, headers, body}` (body parsed when JSON; header names in lower case, `set-cookie` a list of every cookie set). Non-2xx fails the node with `http_error`; an answer larger than SVC_EGRESS_RESPONSE_LIMIT with `response_too_large`.",
  configSchema: config,
  run: async ({ config: c, connection, node, signal }) => {
    const target = await connection();
    let result;
    try {
      result = await httpCall(target, c, { timeoutMs: node.timeout_ms ?? 30_000, signal });
    } catch (err) {
      // The egress policy's refusal and answers that can never be read are final; the network's trouble is retried.
      if (err instanceof EgressDeniedError) throw ApplicationFailure.nonRetryable(err.message, CODE.egress_denied);
      // The same target would answer as much again: refused, not retried.
      if (err instanceof ResponseTooLargeError) throw ApplicationFailure.nonRetryable(err.message, CODE.response_too_large, { limit: err.limit });
      if (err instanceof HttpCallError) {
        const final = err.reason === 'too_many_redirects' || err.reason === 'invalid_response' || err.reason === 'invalid_url';
        throw ApplicationFailure.create({ message: err.message, type: CODE.http_error, nonRetryable: final, details: [{ reason: err.reason }] });
      }
      throw err;
    }
    if (result.status < 200 || result.status >= 300) {
      const message = `HTTP ${result.status} from ${c.method} ${c.path}`;
      const details = { status: result.status, body: result.body };
      if (result.status === 429 || result.status >= 500) throw ApplicationFailure.retryable(message, CODE.http_error, details);
      throw ApplicationFailure.nonRetryable(message, CODE.http_error, details);
    }
    return { output: result };
  },
};
