import type { Context } from 'koa';
import { z } from 'zod';
import type { Principal } from '../auth/auth.service.js';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../platform/json-depth.js';
import {
  AppError,
  forbidden,
  invalidRequest,
  problemsOf,
  unauthenticated,
  validationFailed,
  type FieldProblem,
  type HttpErrorCode,
} from '../platform/errors.js';

/** Who may call a route: anyone, any signed-in user, or a user holding a capability. */
export type Access = 'public' | 'authenticated' | { capability: string };

/** A response header, documented under the response that carries it. */
export interface HeaderSpec {
  description: string;
  /** Always sent with this response (the test client checks that it is). */
  required?: boolean;
  schema?: Record<string, unknown>;
}

/**
 * A `text/event-stream` answer: the named schema of one event, and per event name the schema of
 * its data (JSON text on the wire). The generator documents each event as its own named schema.
 */
export interface EventStreamSpec {
  /** Component name of the union of the events, e.g. `AgentStreamEvent`. */
  name: string;
  description: string;
  /** Event name to the schema of its data, in the order the events can come. */
  events: Record<string, z.ZodType>;
}

/**
 * A code a route answers, and when: one line, or with the status it is answered with here when
 * that is one of the code's `otherStatuses` in the catalogue.
 */
export type RouteError = string | { status: number; when: string };
export type RouteErrors = Partial<Record<HttpErrorCode, RouteError>>;

export interface ResponseSpec {
  description: string;
  /** Schema of `data` inside the success envelope. */
  data?: z.ZodType;
  /** Schema of the whole body, for the few routes whose body is not the standard envelope. */
  raw?: z.ZodType;
  /** Content type other than JSON. */
  contentType?: string;
  /** The same status answered as an event stream instead, when the request asks for it (`stream: true`). */
  eventStream?: EventStreamSpec;
  /** Headers this response carries besides those every response has (X-Request-Id). */
  headers?: Record<string, HeaderSpec>;
  /** An error answer that is not the JSON envelope (an HTML page): the catalogue's codes it stands for (`x-error-codes`). */
  errorCodes?: HttpErrorCode[];
}

export interface Reply {
  status?: number;
  data?: unknown;
  raw?: unknown;
  headers?: Record<string, string>;
  /** The handler wrote the response itself (streams). */
  handled?: boolean;
}

type Input<S> = S extends z.ZodType ? z.output<S> : undefined;

export interface HandlerInput<P, Q, B, A extends Access, H = undefined> {
  params: Input<P>;
  query: Input<Q>;
  body: Input<B>;
  /** The request headers the route declares (lower-case names), validated. */
  headers: Input<H>;
  principal: A extends 'public' ? Principal | undefined : Principal;
  ctx: Context;
}

export interface RouteSpec<
  P extends z.ZodType | undefined = z.ZodType | undefined,
  Q extends z.ZodType | undefined = z.ZodType | undefined,
  B extends z.ZodType | undefined = z.ZodType | undefined,
  A extends Access = Access,
  H extends z.ZodType | undefined = z.ZodType | undefined,
> {
  method: 'get' | 'post' | 'patch' | 'put' | 'delete';
  /** OpenAPI-style path, `{name}` for parameters. */
  path: string;
  operationId: string;
  /** One line: what the operation does. */
  summary: string;
  /** What a client writer needs beyond the summary: behaviour, limits, who may call, what comes back. */
  description: string;
  tag: string;
  access: A;
  /**
   * For a `public` route whose guard or handler checks credentials itself (the codec server, the
   * nonce): the credentials it takes, `basic` (an application password) or `cookie` (the session
   * cookie alone, without a nonce), and the capability it needs. Documented as the operation's
   * security, with its 401 (and 403).
   */
  checksCredentials?: { accepts: ('basic' | 'cookie')[]; capability?: string };
  params?: P;
  query?: Q;
  body?: B;
  /** Request headers the route reads, with lower-case names (documented as header parameters). */
  headers?: H;
  /** A body may be omitted entirely (the schema then sees `{}`). */
  bodyOptional?: boolean;
  /** Accepted request content types; JSON unless stated. */
  bodyTypes?: ('json' | 'form')[];
  /**
   * Runs first, before access control and validation, so that malformed requests count too
   * (per-address rate limits of public endpoints).
   */
  guard?: (ctx: Context) => Promise<void>;
  /**
   * The handler changes nothing (and does not stream), so it may run while the guard decides;
   * the guard's refusal still wins over whatever the handler answered.
   */
  readOnly?: boolean;
  /** Code of a request that fails its schemas; `validation_failed` unless a contract names another. */
  invalidCode?: 'validation_failed' | 'invalid_request';
  /**
   * The error codes the route answers besides those every route answers (the OpenAPI generator
   * adds those: `invalid_request`, `validation_failed`, `unauthenticated`, `rate_limited`,
   * `internal_error`, `service_unavailable`; `forbidden` with a capability, `not_found` with path
   * parameters, `payload_too_large` and `unsupported_media_type` with a body), each with when it
   * is answered here. The document lists them per status (`x-error-codes`, an enum of `error`).
   */
  errors?: RouteErrors;
  responses: Record<number, ResponseSpec>;
  handler: (input: HandlerInput<P, Q, B, A, H>) => Promise<Reply>;
}

// Bivariant view used by the registry and the router.
export type AnyRoute = RouteSpec<any, any, any, any, any>;

/** Identity helper that keeps each route's parameter, query and body types. */
export function defineRoute<
  P extends z.ZodType | undefined = undefined,
  Q extends z.ZodType | undefined = undefined,
  B extends z.ZodType | undefined = undefined,
  const A extends Access = Access,
  H extends z.ZodType | undefined = undefined,
>(spec: RouteSpec<P, Q, B, A, H>): RouteSpec<P, Q, B, A, H> {
  return spec;
}

function parse<S extends z.ZodType>(schema: S, value: unknown, location: 'body' | 'query' | 'path' | 'header', code: AnyRoute['invalidCode']): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const problems = problemsOf(result.error, location);
  if (code !== 'invalid_request') throw validationFailed(problems);
  throw invalidRequest(problems.map((p) => `${p.field}: ${p.message}`).join('; '), { errors: problems });
}

/** Koa gives repeated query keys as arrays; every documented parameter takes one value. */
function singleValued(query: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  const repeated: FieldProblem[] = [];
  for (const [key, value] of Object.entries(query)) {
    if (Array.isArray(value)) repeated.push({ field: key, message: 'must be given once' });
    else if (value !== undefined) out[key] = value;
  }
  if (repeated.length) throw validationFailed(repeated);
  return out;
}

function checkAccess(access: Access, principal: Principal | undefined) {
  if (access === 'public') return;
  if (!principal) throw unauthenticated();
  if (typeof access === 'object' && !principal.can(access.capability)) throw forbidden(access.capability);
}

function checkContentType(ctx: Context, route: AnyRoute) {
  const hasBody = (ctx.request.length !== undefined && ctx.request.length > 0) || ctx.get('transfer-encoding') !== '';
  if (!hasBody) return;
  const types = route.bodyTypes ?? ['json'];
  const accepted = types.map((t) => (t === 'json' ? 'json' : 'urlencoded'));
  if (!ctx.is(...accepted)) {
    throw new AppError(
      'unsupported_media_type',
      `Send the body as ${types.map((t) => (t === 'json' ? 'application/json' : 'application/x-www-form-urlencoded')).join(' or ')}`,
    );
  }
}

/** Wraps a route's handler with its guard, access control, validation and the success envelope. */
export function toMiddleware(route: AnyRoute) {
  return async (ctx: Context) => {
    if (!route.guard) return respond(route, ctx);
    if (!route.readOnly) {
      await route.guard(ctx);
      return respond(route, ctx);
    }
    // Nothing a read-only handler does needs undoing, so it runs while the guard decides (one
    // round trip of latency instead of two); a refusal by the guard still replaces its answer.
    const [guard, answer] = await Promise.allSettled([route.guard(ctx), respond(route, ctx)]);
    if (guard.status === 'rejected') throw guard.reason;
    if (answer.status === 'rejected') throw answer.reason;
  };
}

/** Access control, validation, the handler and the success envelope. */
/**
 * PostgreSQL text cannot hold U+0000, so a NUL anywhere in the input would surface as a database
 * error; it is refused up front instead.
 */
function findNul(value: unknown, path: string, depth = 0): string | undefined {
  if (typeof value === 'string') return value.includes('\u0000') ? path : undefined;
  if (depth > 512 || value === null || typeof value !== 'object') return undefined;
  for (const [key, item] of Object.entries(value)) {
    if (key.includes('\u0000')) return path ? `${path}.${key}` : key;
    const found = findNul(item, path ? `${path}.${key}` : key, depth + 1);
    if (found) return found;
  }
  return undefined;
}

function refuseNul(ctx: Context) {
  const field = findNul(ctx.params ?? {}, '') ?? findNul(ctx.query, '') ?? findNul((ctx.request as unknown as { body?: unknown }).body, '');
  if (field !== undefined) throw validationFailed([{ field: field || 'body', message: 'must not contain NUL characters' }]);
}

async function respond(route: AnyRoute, ctx: Context): Promise<void> {
  const principal = ctx.state.principal as Principal | undefined;
  checkAccess(route.access, principal);
  refuseNul(ctx);
  const params = route.params ? parse(route.params, ctx.params ?? {}, 'path', route.invalidCode) : undefined;
  const query = route.query
    ? parse(route.query, singleValued(ctx.query as Record<string, string | string[]>), 'query', route.invalidCode)
    : Object.keys(ctx.query).length
      ? (() => {
          throw validationFailed(Object.keys(ctx.query).map((k) => ({ field: k, message: 'is not a known parameter' })));
        })()
      : undefined;
  const headers = route.headers ? parse(route.headers, ctx.headers, 'header', route.invalidCode) : undefined;
  let body: unknown;
  if (route.body) {
    checkContentType(ctx, route);
    const raw = (ctx.request as unknown as { body?: unknown }).body;
    const empty = raw === undefined || (typeof raw === 'object' && raw !== null && !Array.isArray(raw) && Object.keys(raw).length === 0 && !ctx.request.length);
    if (empty && !route.bodyOptional) throw invalidRequest('A request body is required');
    if (nestsDeeperThan(raw)) throw invalidRequest(`The body nests deeper than ${MAX_JSON_DEPTH} levels`);
    body = parse(route.body, empty ? {} : raw, 'body', route.invalidCode);
  }
  const reply = await route.handler({ params, query, body, headers, principal, ctx });
  if (reply.handled) return;
  for (const [k, v] of Object.entries(reply.headers ?? {})) ctx.set(k, v);
  ctx.status = reply.status ?? 200;
  ctx.body = reply.raw !== undefined ? reply.raw : { status: 'ok', data: reply.data ?? null };
}
