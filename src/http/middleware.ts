import { randomUUID } from 'node:crypto';
import type { Context, Next } from 'koa';
import { SESSION_COOKIE, type AuthService } from '../auth/auth.service.js';
import { isDatabaseUnavailable } from '../db/availability.js';
import { translateDatabaseError } from '../db/database-errors.js';
import { AppError, unauthenticated } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import { temporalFailure } from '../temporal/connection.js';
import type { Metrics } from '../platform/metrics.js';
import { SpanKind, SpanStatusCode, TRACER, context, contextFromHeaders, trace, type Span } from '../platform/tracing.js';

const requestIdPattern = /^[A-Za-z0-9._-]{8,100}$/;

/**
 * Request id (kept from X-Request-Id when sane), a child logger, one log line per request, the
 * request's metrics, and its server span (continuing a caller's W3C trace context) in which the
 * whole request runs.
 */
export function requestContext(logger: Logger, metrics: Pick<Metrics, 'httpRequests' | 'httpDuration'>) {
  // Scrapes and probes of the health routes would only fill the traces with noise.
  const untraced = new Set(['/metrics', '/healthz', '/readyz']);
  const handle = async (ctx: Context, next: Next, span?: Span) => {
    const incoming = ctx.get('x-request-id');
    const id = requestIdPattern.test(incoming) ? incoming : randomUUID();
    const started = process.hrtime.bigint();
    ctx.state.requestId = id;
    ctx.state.logger = logger.child({ request_id: id });
    ctx.set('X-Request-Id', id);
    try {
      await next();
    } finally {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      // The matched route template is logged and counted, not the URL: paths carry ids and licence keys.
      const route = (ctx as unknown as { _matchedRoute?: string })._matchedRoute ?? '(unmatched)';
      const status = ctx.status;
      const line = { method: ctx.method, route, status, ms: Math.round(seconds * 10_000) / 10, user: ctx.state.principal?.login };
      const requestLogger = ctx.state.logger;
      // The metrics, the span's end and the log line are written once the answer has gone (or the
      // connection closed first): the client does not wait for them. What they say is taken here.
      afterResponse(ctx, () => {
        const labels = { route, method: line.method, status: String(status) };
        metrics.httpRequests.inc(labels);
        metrics.httpDuration.observe(labels, seconds);
        if (span) {
          span.updateName(`${line.method} ${route}`);
          span.setAttributes({ 'http.route': route, 'http.response.status_code': status, 'svc.request_id': id });
          if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
          span.end();
        }
        if (status >= 500) requestLogger.error(line, 'request failed');
        else requestLogger.info(line, 'request');
      });
    }
  };
  return (ctx: Context, next: Next) => {
    if (untraced.has(ctx.path)) return handle(ctx, next);
    const attributes = { 'http.request.method': ctx.method };
    return context.with(contextFromHeaders(ctx.headers), () =>
      trace.getTracer(TRACER).startActiveSpan(ctx.method, { kind: SpanKind.SERVER, attributes }, (span) => handle(ctx, next, span)),
    );
  };
}

/**
 * Runs `later` once the response has been written out, or at once when it has been already; also
 * when the connection closes first. It runs in the request's context (its span), as the code
 * that asked for it did.
 */
function afterResponse(ctx: Context, later: () => void): void {
  const res = ctx.res;
  // Called from the response's events: a throw here would be no request's error but the process's.
  const safe = () => {
    try {
      later();
    } catch (err) {
      (ctx.state.logger as Logger | undefined)?.error({ err }, "writing a request's log line or metrics failed");
    }
  };
  const fn = context.bind(context.active(), safe);
  if (res.writableFinished || res.destroyed) return fn();
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    res.off('finish', once);
    res.off('close', once);
    fn();
  };
  res.once('finish', once);
  res.once('close', once);
}

/** An error of node:zlib's decompressors (raised while a request body is inflated). */
function isDecompressionError(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  const errno = (err as { errno?: unknown })?.errno;
  return err instanceof Error && typeof code === 'string' && typeof errno === 'number' && (/^Z_[A-Z_]+$/.test(code) || /^ERR__ERROR_/.test(code));
}

/** Maps any thrown value to the failure envelope; internals stay in the log. */

export function toAppError(err: unknown): AppError | undefined {
  if (err instanceof AppError) return err;
  const e = err as { status?: number; type?: string; code?: string | number; message?: string; name?: string };
  if (e?.status === 413 || e?.type === 'entity.too.large') return new AppError('payload_too_large', 'Request body is larger than the limit');
  if (e?.status === 415 || e?.type === 'encoding.unsupported' || e?.type === 'charset.unsupported') {
    return new AppError('unsupported_media_type', 'Unsupported body encoding or charset');
  }
  // Body-parser failures (malformed JSON, bad form encoding) are http-errors with a 4xx status.
  if (typeof e?.status === 'number' && e.status >= 400 && e.status < 500) {
    return new AppError('invalid_request', 'Malformed request body');
  }
  // A body whose Content-Encoding (gzip, deflate, br) it is not in: the decompressor's error,
  // the caller's mistake (zlib's codes are Z_*, brotli's ERR__*).
  if (isDecompressionError(err)) {
    return new AppError('invalid_request', 'The body is not compressed as its Content-Encoding says');
  }
  // Constraint violations (a race lost between a check and an insert), and values PostgreSQL
  // cannot hold that validation let through: the caller's 4xx, never a 500 carrying SQL text.
  const translated = translateDatabaseError(err);
  if (translated instanceof AppError) return translated;
  if (isDatabaseUnavailable(err)) {
    return new AppError('service_unavailable', 'PostgreSQL is unavailable; retry later', { dependency: 'postgresql' }, { 'Retry-After': '5' });
  }
  // A Temporal call that failed: only an unavailable server is a 503 worth retrying.
  const temporal = temporalFailure(err);
  if (temporal?.kind === 'missing') return new AppError('not_found', `Temporal has no record of this run${temporal.detail ? `: ${temporal.detail}` : ''}`);
  if (temporal?.kind === 'refused') return new AppError('conflict', `Temporal refused the request${temporal.detail ? `: ${temporal.detail}` : ''}`);
  if (temporal?.kind === 'unavailable' || (typeof e?.code === 'number' && e.code === 14)) {
    return new AppError('service_unavailable', 'Temporal is unavailable; retry later', { dependency: 'temporal' }, { 'Retry-After': '5' });
  }
  return undefined;
}

/** The one place errors become responses. */
export function errorRenderer() {
  return async (ctx: Context, next: Next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) {
        throw new AppError('not_found', `No route for ${ctx.method} ${ctx.path}`);
      }
    } catch (err) {
      const known = toAppError(err);
      if (!known) ctx.state.logger?.error({ err }, 'unhandled error');
      else if (known.status >= 500) ctx.state.logger?.warn({ err }, known.message);
      const error = known ?? new AppError('internal_error', `Internal error (request ${ctx.state.requestId})`);
      ctx.status = error.status;
      for (const [k, v] of Object.entries(error.headers ?? {})) ctx.set(k, v);
      ctx.body = { status: 'fail', error: error.code, message: error.message, ...(error.data ? { data: error.data } : {}) };
    }
  };
}

/**
 * Resolves the caller. HTTP Basic (application password) must be right or the request fails;
 * a session cookie counts only with a valid X-Svc-Nonce, otherwise the request is anonymous
 * (the cookie alone is kept in `state.cookieSession` for the nonce and logout routes).
 */
export function authenticate(auth: AuthService) {
  return async (ctx: Context, next: Next) => {
    // The metrics route decides its own access (a scraper's bearer token is no user's credential).
    if (ctx.path === '/metrics') return next();
    const header = ctx.get('authorization');
    if (header) {
      const match = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
      if (!match) throw unauthenticated('Only HTTP Basic with an application password is accepted');
      const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon <= 0) throw unauthenticated('Malformed Basic credentials');
      ctx.state.principal = await auth.authenticateBasic(decoded.slice(0, colon), decoded.slice(colon + 1), ctx.ip);
    } else {
      const cookie = ctx.cookies.get(SESSION_COOKIE);
      if (cookie) {
        const session = await auth.sessionFromCookie(cookie);
        if (session) {
          ctx.state.cookieSession = session;
          if (auth.verifyNonce(session.sessionId!, ctx.get('x-svc-nonce') || undefined)) ctx.state.principal = session;
        }
      }
    }
    await next();
  };
}
