import { z } from 'zod';
import type { AnyRoute } from './route.js';

const errorSchema = {
  type: 'object',
  required: ['status', 'error', 'message'],
  properties: {
    status: { const: 'fail' },
    error: { type: 'string', description: 'Stable machine-readable code' },
    message: { type: 'string', description: 'Human-readable explanation' },
    data: { type: 'object', additionalProperties: true },
  },
} as const;

const genericErrors: Record<number, string> = {
  400: 'Malformed or invalid request (`invalid_request`, `validation_failed`)',
  500: 'Internal error (`internal_error`); details are only in the server log',
  503: 'A dependency (PostgreSQL or Temporal) is unavailable (`service_unavailable`)',
};

/**
 * One server-sent event. OpenAPI 3.1 has no `itemSchema`, so by the convention tools follow the
 * schema of an event-stream response describes each event: its name, and its data as JSON text.
 */
function eventSchema(events: string[] | undefined) {
  return {
    type: 'object',
    required: ['event', 'data'],
    properties: {
      event: { type: 'string', ...(events ? { enum: events } : {}) },
      data: { type: 'string', contentMediaType: 'application/json', description: 'The event payload as JSON' },
      id: { type: 'string' },
      retry: { type: 'integer' },
    },
  };
}

/** Shared definitions hoisted out of individual schemas into `components.schemas`. */
let hoisted: Record<string, unknown> = {};
let counter = 0;

/**
 * zod emits recursive or reused parts as `$defs` with `#/$defs/...` references, which in an
 * OpenAPI document would point at the document root; they are moved to components.schemas.
 */
function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const out = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as Record<string, unknown>;
  delete out.$schema;
  const defs = out.$defs as Record<string, unknown> | undefined;
  if (!defs) return out;
  delete out.$defs;
  const names = new Map(Object.keys(defs).map((name) => [name, `Def${++counter}_${name.replace(/[^A-Za-z0-9_]/g, '')}`]));
  const rewrite = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(rewrite);
    if (!value || typeof value !== 'object') return value;
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => {
        if (k === '$ref' && typeof v === 'string' && v.startsWith('#/$defs/')) return [k, `#/components/schemas/${names.get(v.slice(8))}`];
        return [k, rewrite(v)];
      }),
    );
  };
  for (const [name, def] of Object.entries(defs)) hoisted[names.get(name)!] = rewrite(def);
  return rewrite(out) as Record<string, unknown>;
}

function parameters(route: AnyRoute) {
  const list: Record<string, unknown>[] = [];
  for (const [where, schema] of [
    ['path', route.params],
    ['query', route.query],
    ['header', route.headers],
  ] as const) {
    if (!schema) continue;
    const object = jsonSchema(schema, 'input') as { properties?: Record<string, Record<string, unknown>>; required?: string[] };
    for (const [name, prop] of Object.entries(object.properties ?? {})) {
      const { description, ...rest } = prop;
      list.push({
        // Header names are case-insensitive; they are documented in their usual spelling.
        name: where === 'header' ? name.replace(/(^|-)([a-z])/g, (_, dash: string, c: string) => dash + c.toUpperCase()) : name,
        in: where,
        required: where === 'path' || (object.required ?? []).includes(name),
        schema: rest,
        ...(description ? { description } : {}),
      });
    }
  }
  return list;
}

function envelope(data: Record<string, unknown>) {
  return { type: 'object', required: ['status', 'data'], properties: { status: { const: 'ok' }, data } };
}

function operation(route: AnyRoute) {
  const responses: Record<string, unknown> = {};
  for (const [status, spec] of Object.entries(route.responses)) {
    const content: Record<string, unknown> = spec.contentType
      ? { [spec.contentType]: { schema: { type: 'string' } } }
      : {
          'application/json': {
            schema: spec.raw ? jsonSchema(spec.raw, 'output') : envelope(spec.data ? jsonSchema(spec.data, 'output') : {}),
          },
        };
    if (spec.alsoContentType)
      content[spec.alsoContentType] = { schema: spec.alsoContentType === 'text/event-stream' ? eventSchema(spec.events) : { type: 'string' } };
    responses[status] = { description: spec.description, content };
  }
  const errors: Record<number, string> = { ...genericErrors };
  errors[401] =
    route.access === 'public'
      ? 'Credentials were sent and are wrong (`unauthenticated`); the route itself needs none'
      : 'Not authenticated (`unauthenticated`)';
  if (typeof route.access === 'object') errors[403] = `Missing capability ${route.access.capability} (\`forbidden\`)`;
  if (route.params) errors[404] = 'No such resource (`not_found`)';
  if (route.body) {
    errors[413] = 'Body larger than the configured limit (`payload_too_large`)';
    errors[415] = 'Unsupported content type (`unsupported_media_type`)';
  }
  // Any route can answer 429: repeated wrong Basic credentials are refused before routing.
  errors[429] = 'Too many requests or failed logins (`rate_limited`), see Retry-After';
  Object.assign(errors, route.errors ?? {});
  for (const [status, description] of Object.entries(errors)) {
    responses[status] ??= { description, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } };
  }
  // Answered by Node's HTTP parser before the application sees the request: no envelope.
  responses['431'] = { description: 'Request line or headers larger than the HTTP server accepts (no body)' };
  const bodyTypes = route.bodyTypes ?? ['json'];
  return {
    operationId: route.operationId,
    summary: route.summary,
    ...(route.description ? { description: route.description } : {}),
    tags: [route.tag],
    security: route.access === 'public' ? [] : [{ applicationPassword: [] }, { sessionCookie: [], nonce: [] }],
    ...(typeof route.access === 'object' ? { 'x-capability': route.access.capability } : {}),
    parameters: parameters(route),
    ...(route.body
      ? {
          requestBody: {
            required: !route.bodyOptional,
            content: Object.fromEntries(
              bodyTypes.map((t) => [t === 'json' ? 'application/json' : 'application/x-www-form-urlencoded', { schema: jsonSchema(route.body!, 'input') }]),
            ),
          },
        }
      : {}),
    responses,
  };
}

/** Builds the OpenAPI 3.1 document from the same route definitions that validate requests. */
export function buildOpenApi(routes: AnyRoute[], version: string) {
  hoisted = {};
  counter = 0;
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) (paths[route.path] ??= {})[route.method] = operation(route);
  return {
    openapi: '3.1.0',
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    info: {
      title: 'Workflow automation service',
      version,
      description:
        'Durable workflows on Temporal, a gated chat agent, a records store and licence endpoints. ' +
        'Success bodies are `{status: "ok", data}`; failures are `{status: "fail", error, message, data?}`.',
    },
    paths,
    components: {
      schemas: { Error: errorSchema, ...hoisted },
      securitySchemes: {
        applicationPassword: { type: 'http', scheme: 'basic', description: 'login and application password' },
        sessionCookie: { type: 'apiKey', in: 'cookie', name: 'svc_session' },
        nonce: { type: 'apiKey', in: 'header', name: 'X-Svc-Nonce' },
      },
    },
  };
}
