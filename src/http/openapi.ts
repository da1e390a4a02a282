import { z } from 'zod';
import type { AnyRoute, EventStreamSpec, HeaderSpec, ResponseSpec, RouteError } from './route.js';
import { answersWith, ERROR_CODES, type HttpErrorCode } from '../../workflows/error-codes.js';

type Json = Record<string, unknown>;
type Io = 'input' | 'output';

// ---------------------------------------------------------------------------------------------
// Hooks for the schemas of features

const documentation = new WeakMap<z.ZodType, { documented: z.ZodType; as?: Io }>();

/**
 * Validates with `schema` but documents `documented`. For a schema whose last checks run later
 * and report their problems their own way (a node's type and config are checked with the whole
 * graph, every problem listed): the document then shows what the service accepts in the end, so
 * that a client's types catch a mistake before the request is sent. `as: 'input'` documents the
 * request form in answers too, for a value stored as it was sent (a node's config).
 */
export function documentAs<S extends z.ZodType>(schema: S, documented: z.ZodType, as?: Io): S {
  documentation.set(schema, { documented, ...(as ? { as } : {}) });
  return schema;
}

const contents = new WeakMap<z.ZodType, { mediaType: string; schema: z.ZodType }>();

/**
 * Documents a string whose text is a document of its own (a YAML workflow file): JSON Schema's
 * `contentMediaType` and `contentSchema`, the latter a schema of the document (named, so that
 * the document's components hold it).
 */
export function documentContent<S extends z.ZodType>(schema: S, mediaType: string, content: z.ZodType): S {
  contents.set(schema, { mediaType, schema: content });
  return schema;
}

/**
 * Names a schema in the document (`components.schemas.<id>`), so that generated clients have a type
 * of that name, and gives it a description and examples. Returns the same schema.
 */
export function named<S extends z.ZodType>(schema: S, id: string, meta: { description?: string; examples?: unknown[] } = {}): S {
  z.globalRegistry.add(schema, { ...z.globalRegistry.get(schema), id, ...meta });
  if (meta.examples) examples.set(id, meta.examples);
  return schema;
}

/** Schemas that stand for a reference to a named schema (see schemaRef). */
const references = new WeakMap<z.ZodType, string>();

/**
 * A schema documented as a reference to the named schema `name` (its request form in requests):
 * for a schema that holds itself (a for_each body holds nodes), which zod cannot convert across
 * the documented forms of its parts. It validates nothing by itself.
 */
export function schemaRef(name: string): z.ZodType {
  const schema = z.unknown();
  references.set(schema, name);
  return schema;
}

/** Examples by schema name: zod leaves them out of the request form of a schema that transforms its input. */
const examples = new Map<string, unknown[]>();

/**
 * Any JSON value. zod's `z.json()` is documented by a recursive union that generated types cannot
 * express (a type alias referring to itself); this is documented as `JsonValue`, which is `{}`.
 */
export const jsonValue = documentAs(z.json(), named(z.unknown(), 'JsonValue', { description: 'Any JSON value' }));

// ---------------------------------------------------------------------------------------------
// Named schemas

/** Marks a reference to the input (request) form of a named schema until names are final. */
const INPUT = '~input';
const SCHEMAS = '#/components/schemas/';
const zodDef = /^#\/\$defs\/(.+)$/;
const anonymousDef = /^__schema\d+$/;

function walk(value: unknown, visit: (node: Json) => Json): unknown {
  if (Array.isArray(value)) return value.map((v) => walk(v, visit));
  if (!value || typeof value !== 'object') return value;
  return visit(Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v, visit)])));
}

const schemaKeys = [
  'additionalProperties',
  'items',
  'not',
  'if',
  'then',
  'else',
  'propertyNames',
  'contains',
  'contentSchema',
  'unevaluatedItems',
  'unevaluatedProperties',
];
const schemaListKeys = ['anyOf', 'oneOf', 'allOf', 'prefixItems'];
const schemaMapKeys = ['properties', 'patternProperties', '$defs', 'dependentSchemas'];

/** Applies `visit` to every schema inside `schema` (not to examples, constants or defaults), innermost first. */
function mapSchemas(schema: unknown, visit: (node: Json) => Json): unknown {
  if (!schema || typeof schema !== 'object' || Array.isArray(schema)) return schema;
  const node: Json = { ...(schema as Json) };
  for (const key of schemaKeys) if (key in node) node[key] = mapSchemas(node[key], visit);
  for (const key of schemaListKeys) if (Array.isArray(node[key])) node[key] = (node[key] as unknown[]).map((s) => mapSchemas(s, visit));
  for (const key of schemaMapKeys) {
    if (node[key] && typeof node[key] === 'object') {
      node[key] = Object.fromEntries(Object.entries(node[key] as Json).map(([name, s]) => [name, mapSchemas(s, visit)]));
    }
  }
  return visit(node);
}

/**
 * In request schemas a field's default is said in its description instead of the `default`
 * keyword: generators read `default` in a named schema as "always present" (openapi-typescript
 * makes such a field required), which is true of answers but not of requests.
 */
function defaultsAsText(schema: Json): Json {
  return mapSchemas(schema, (node) => {
    if (!('default' in node)) return node;
    const { default: value, ...rest } = node;
    const note = `Default: \`${JSON.stringify(value)}\`.`;
    return { ...rest, description: typeof rest.description === 'string' ? `${rest.description.replace(/\.?$/, '.')} ${note}` : note };
  }) as Json;
}

/** JSON with sorted keys, to compare two schemas. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((value as Json)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * Converts zod schemas to JSON Schema and collects the named ones (those with a `.meta({ id })`)
 * as `components.schemas`. A schema used in requests and in answers whose two forms differ (a
 * default makes a field optional in the request and present in the answer) is named `<id>Input`
 * in requests.
 */
class SchemaSet {
  private readonly forms = new Map<string, Partial<Record<Io, Json>>>();

  /** `keepDefaults`: parameters keep the `default` keyword, which generators read right there. */
  convert(schema: z.ZodType, io: Io, keepDefaults = false): Json {
    const out = z.toJSONSchema(schema, {
      target: 'draft-2020-12',
      io,
      unrepresentable: 'any',
      override: (ctx) => {
        const reference = references.get(ctx.zodSchema as unknown as z.ZodType);
        if (reference) {
          for (const key of Object.keys(ctx.jsonSchema)) delete (ctx.jsonSchema as Json)[key];
          (ctx.jsonSchema as Json).$ref = `${SCHEMAS}${reference}${io === 'input' ? INPUT : ''}`;
          return;
        }
        const content = contents.get(ctx.zodSchema as unknown as z.ZodType);
        if (content) {
          Object.assign(ctx.jsonSchema, { contentMediaType: content.mediaType, contentSchema: this.convert(content.schema, 'input') });
        }
        const documented = documentation.get(ctx.zodSchema as unknown as z.ZodType);
        if (!documented) return;
        const replacement = this.convert(documented.documented, documented.as ?? io);
        for (const key of Object.keys(ctx.jsonSchema)) delete (ctx.jsonSchema as Json)[key];
        Object.assign(ctx.jsonSchema, replacement);
      },
    }) as Json;
    delete out.$schema;
    const defs = (out.$defs ?? {}) as Record<string, Json>;
    delete out.$defs;
    // A part zod extracted without a name that only points elsewhere (a documented recursive schema).
    const aliasOf = (key: string) => {
      const def = defs[key]!;
      return anonymousDef.test(key) && Object.keys(def).length === 1 && typeof def.$ref === 'string' ? def.$ref : undefined;
    };
    const target = new Map<string, string>();
    const resolve = (key: string): string => {
      const known = target.get(key);
      if (known) return known;
      const alias = aliasOf(key);
      // Only a recursive part is extracted without a name; generated types need one to refer to.
      if (!alias && anonymousDef.test(key))
        throw new Error(`A recursive schema needs a name: give it one with named() (${JSON.stringify(defs[key]).slice(0, 200)})`);
      const ref = alias ? (zodDef.test(alias) ? resolve(zodDef.exec(alias)![1]!) : alias) : `${SCHEMAS}${key}${io === 'input' ? INPUT : ''}`;
      target.set(key, ref);
      return ref;
    };
    const rewrite = (value: unknown) =>
      walk(value, (node) => (typeof node.$ref === 'string' && zodDef.test(node.$ref) ? { ...node, $ref: resolve(zodDef.exec(node.$ref)![1]!) } : node)) as Json;
    const finish = (schema: Json) => (io === 'input' && !keepDefaults ? defaultsAsText(rewrite(schema)) : rewrite(schema));
    for (const [key, def] of Object.entries(defs)) {
      if (aliasOf(key)) continue;
      this.add(resolve(key).slice(SCHEMAS.length).replace(INPUT, ''), io, finish(def));
    }
    return finish(out);
  }

  /** A schema written by hand (events, the error body), under its name, for both directions. */
  addFixed(name: string, schema: Json): string {
    this.add(name, 'output', schema);
    return `${SCHEMAS}${name}`;
  }

  private add(name: string, io: Io, given: Json) {
    const schema = examples.has(name) && !given.examples ? { ...given, examples: examples.get(name) } : given;
    const forms = this.forms.get(name) ?? {};
    const known = forms[io];
    if (known && canonical(known) !== canonical(schema)) throw new Error(`Two different schemas are named ${name}`);
    forms[io] = schema;
    this.forms.set(name, forms);
  }

  /** Final names: `<id>Input` where the request form differs from the answer form, else `<id>`. */
  finish(): { schemas: Record<string, Json>; rename: (ref: string) => string } {
    const differs = new Set<string>();
    const normal = (ref: string) => {
      if (!ref.endsWith(INPUT)) return ref;
      const name = ref.slice(SCHEMAS.length, -INPUT.length);
      return differs.has(name) ? ref : ref.slice(0, -INPUT.length);
    };
    const normalised = (schema: Json) => canonical(walk(schema, (node) => (typeof node.$ref === 'string' ? { ...node, $ref: normal(node.$ref) } : node)));
    for (let changed = true; changed;) {
      changed = false;
      for (const [name, forms] of this.forms) {
        if (differs.has(name) || !forms.input || !forms.output || normalised(forms.input) === normalised(forms.output)) continue;
        differs.add(name);
        changed = true;
      }
    }
    const rename = (ref: string) => {
      if (!ref.endsWith(INPUT)) return ref;
      const name = ref.slice(SCHEMAS.length, -INPUT.length);
      return `${SCHEMAS}${differs.has(name) ? `${name}Input` : name}`;
    };
    const schemas: Record<string, Json> = {};
    for (const [name, forms] of this.forms) {
      if (forms.output) schemas[name] = forms.output;
      if (forms.input && (differs.has(name) || !forms.output)) {
        const inputName = differs.has(name) ? `${name}Input` : name;
        if (this.forms.has(inputName) && inputName !== name) throw new Error(`${inputName} is the request form of ${name} and a schema of its own`);
        schemas[inputName] = forms.input;
      }
    }
    return { schemas, rename };
  }
}

/**
 * A `oneOf` of named schemas that each fix one property to a distinct constant (a node's `type`,
 * an event's `event`) gets OpenAPI's `discriminator`, so that generators map each branch by it.
 */
function discriminate(node: Json, schemas: Record<string, Json>): Json {
  const branches = node.oneOf;
  if (!Array.isArray(branches) || node.discriminator || !branches.every((b) => typeof b?.$ref === 'string' && b.$ref.startsWith(SCHEMAS))) return node;
  const targets = branches.map((b: { $ref: string }) => ({ ref: b.$ref, schema: schemas[b.$ref.slice(SCHEMAS.length)] }));
  const first = targets[0]?.schema?.properties as Record<string, Json> | undefined;
  for (const property of Object.keys(first ?? {})) {
    const values = targets.map((t) => ((t.schema?.properties as Record<string, Json> | undefined)?.[property]?.const as unknown) ?? undefined);
    if (!values.every((v) => typeof v === 'string') || new Set(values).size !== values.length) continue;
    const required = targets.every((t) => ((t.schema?.required as string[] | undefined) ?? []).includes(property));
    if (!required) continue;
    return { ...node, discriminator: { propertyName: property, mapping: Object.fromEntries(values.map((v, i) => [v as string, targets[i]!.ref])) } };
  }
  return node;
}

// ---------------------------------------------------------------------------------------------
// The parts every operation shares

const errorSchema: Json = {
  type: 'object',
  description: 'The failure envelope of every error answer',
  required: ['status', 'error', 'message'],
  properties: {
    status: { const: 'fail' },
    error: {
      type: 'string',
      description: 'Stable machine-readable code of the catalogue (docs/api.md lists them); each answer of an operation names the codes it carries',
    },
    message: { type: 'string', description: 'Human-readable explanation' },
    data: { type: 'object', additionalProperties: true, description: 'Details of the failure (`errors` names each invalid field)' },
  },
  examples: [
    {
      status: 'fail',
      error: 'validation_failed',
      message: 'title: Too small: expected string to have >=1 characters',
      data: { errors: [{ field: 'title', message: 'Too small: expected string to have >=1 characters', in: 'body' }] },
    },
  ],
};

/** Response headers documented once and referenced by the responses that carry them. */
const headers: Record<string, Json> = {
  'X-Request-Id': {
    description: 'The id of this request in the service log; a sane X-Request-Id sent with the request is kept',
    required: true,
    schema: { type: 'string', pattern: '^[A-Za-z0-9._-]{8,100}$' },
  },
  'Retry-After': { description: 'Seconds to wait before trying again', required: true, schema: { type: 'string', pattern: '^[0-9]+$' } },
  'WWW-Authenticate': { description: 'The authentication scheme to use: `Basic realm="svc"`', required: true, schema: { type: 'string' } },
};
const headerRef = (name: keyof typeof headers) => ({ $ref: `#/components/headers/${name}` });

const tags: { name: string; description: string }[] = [
  { name: 'health', description: 'Liveness, readiness and this document' },
  { name: 'auth', description: 'Browser sign-in with a session cookie and nonce, application passwords, users' },
  { name: 'workflows', description: 'Workflow definitions (a trigger and a graph of typed nodes), starting runs, and the public webhook entry' },
  { name: 'connections', description: 'Stored credentials that nodes and agent sessions use; only a masked preview is ever returned' },
  { name: 'executions', description: 'Runs of workflows: status, timeline per node, output, replays and cancelling' },
  {
    name: 'waits',
    description: 'Waiting inside a run: events that resume runs waiting for them, and the page where an approver decides a workflow approval',
  },
  { name: 'temporal', description: 'The codec server the Temporal Web UI calls to show the encrypted payloads of runs' },
  { name: 'licenses', description: 'The public licence portal that plugins call, its signing keys, and issuing and managing licences' },
  { name: 'licence-webhooks', description: 'Vendor webhooks on licence events, signed, with their delivery records' },
  { name: 'entities', description: 'Entity definitions of the records store: fields, form, lists, capabilities' },
  { name: 'records', description: 'Records of an entity: filtered with EQL, sorted, paginated, written one by one or in bulk' },
  { name: 'agent', description: 'Chat sessions with a model that cannot take a side effect without a human approving it, and the approval gate' },
];

/** Headers of an answer with this status, besides those the route declares. */
function statusHeaders(status: number): Record<string, unknown> {
  return {
    'X-Request-Id': headerRef('X-Request-Id'),
    ...(status === 401 ? { 'WWW-Authenticate': headerRef('WWW-Authenticate') } : {}),
    ...(status === 429 || status === 503 ? { 'Retry-After': headerRef('Retry-After') } : {}),
  };
}

function declaredHeaders(declared: Record<string, HeaderSpec> | undefined): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(declared ?? {}).map(([name, h]) => [
      name,
      { description: h.description, required: h.required ?? false, schema: h.schema ?? { type: 'string' } },
    ]),
  );
}

function envelope(data: Json): Json {
  return { type: 'object', required: ['status', 'data'], properties: { status: { const: 'ok' }, data } };
}

/** `node_failed` / `gate-pending` -> `NodeFailed` / `GatePending`: schema names from snake or kebab case. */
export const pascal = (name: string) => name.replace(/(^|[_-])([a-z])/g, (_, _sep: string, c: string) => c.toUpperCase());

/** The named union of a stream's events; each event is named too, its data JSON text of its own schema. */
function eventStream(stream: EventStreamSpec, set: SchemaSet): string {
  const branches = Object.entries(stream.events).map(([event, data]) =>
    set.addFixed(`${stream.name}${pascal(event)}`, {
      type: 'object',
      description: `The \`${event}\` event: its data is JSON text`,
      required: ['event', 'data'],
      properties: {
        event: { type: 'string', const: event },
        data: { type: 'string', contentMediaType: 'application/json', contentSchema: set.convert(data, 'output') },
        id: { type: 'string' },
        retry: { type: 'integer' },
      },
    }),
  );
  return set.addFixed(stream.name, { description: stream.description, oneOf: branches.map(($ref) => ({ $ref })) });
}

function response(spec: ResponseSpec, status: number, set: SchemaSet): Json {
  const content: Json = spec.contentType
    ? { [spec.contentType]: { schema: { type: 'string' } } }
    : { 'application/json': { schema: spec.raw ? set.convert(spec.raw, 'output') : envelope(spec.data ? set.convert(spec.data, 'output') : {}) } };
  if (spec.eventStream) content['text/event-stream'] = { schema: { $ref: eventStream(spec.eventStream, set) } };
  return { description: spec.description, headers: { ...statusHeaders(status), ...declaredHeaders(spec.headers) }, content };
}

// ---------------------------------------------------------------------------------------------
// Operations

const signedIn = [{ applicationPassword: [] }, { sessionCookie: [], nonce: [] }];

function security(route: AnyRoute): { security: unknown[]; capability?: string; signIn: boolean } {
  if (route.checksCredentials) {
    const { accepts, capability } = route.checksCredentials;
    return {
      security: accepts.map((scheme) => (scheme === 'basic' ? { applicationPassword: [] } : { sessionCookie: [] })),
      ...(capability ? { capability } : {}),
      signIn: true,
    };
  }
  if (route.access === 'public') return { security: [], signIn: false };
  return { security: signedIn, ...(typeof route.access === 'object' ? { capability: route.access.capability } : {}), signIn: true };
}

/**
 * The codes an operation answers, by status, each with when: those every route answers (by its
 * access, path parameters and body), then those the route declares. A route's note replaces the
 * generic one of the same code.
 */
export function errorCodes(route: AnyRoute, capability: string | undefined, signIn: boolean): Map<number, Map<HttpErrorCode, string>> {
  const codes: [HttpErrorCode, string, number?][] = [
    ['invalid_request', 'Malformed request (an unparsable or missing body, nesting too deep)'],
    ['validation_failed', 'Wrong types, unknown fields or query parameters (each named in data.errors)'],
    ['unauthenticated', signIn ? 'Not authenticated' : 'Credentials were sent and are wrong; the route itself needs none'],
  ];
  if (capability) codes.push(['forbidden', `Missing capability ${capability} (named in data.capability)`]);
  if (route.params) codes.push(['not_found', 'No such resource']);
  if (route.body) {
    codes.push(['payload_too_large', 'Body larger than the configured limit']);
    codes.push(['unsupported_media_type', 'Unsupported content type or encoding']);
  }
  // Any route can answer 429: repeated wrong Basic credentials are refused before routing.
  codes.push(['rate_limited', 'Too many requests or failed logins, see Retry-After']);
  codes.push(['internal_error', 'Internal error; details are only in the server log']);
  codes.push(['service_unavailable', 'A dependency (PostgreSQL or Temporal, in data.dependency) is unavailable, see Retry-After']);
  for (const [code, error] of Object.entries(route.errors ?? {}) as [HttpErrorCode, RouteError][]) {
    const at = typeof error === 'string' ? undefined : error.status;
    if (at !== undefined && !answersWith(code, at)) throw new Error(`${route.operationId}: the catalogue of error codes gives ${code} no status ${at}`);
    const index = codes.findIndex(([known]) => known === code);
    const entry: [HttpErrorCode, string, number?] = [code, typeof error === 'string' ? error : error.when, at];
    if (index >= 0) codes[index] = entry;
    else codes.push(entry);
  }
  const byStatus = new Map<number, Map<HttpErrorCode, string>>();
  for (const [code, when, at] of codes) {
    const status = at ?? ERROR_CODES[code].status;
    if (!byStatus.has(status)) byStatus.set(status, new Map());
    byStatus.get(status)!.set(code, when);
  }
  return new Map([...byStatus].sort(([a], [b]) => a - b));
}

/** An error answer naming its codes: in the description, as `x-error-codes`, and as the enum of `error`. */
function errorResponse(status: number, codes: Map<HttpErrorCode, string>): Json {
  const list = [...codes.keys()];
  return {
    description: [...codes].map(([code, when]) => `\`${code}\`: ${when}`).join('; '),
    headers: statusHeaders(status),
    'x-error-codes': list,
    content: { 'application/json': { schema: { allOf: [{ $ref: `${SCHEMAS}Error` }, { type: 'object', properties: { error: { enum: list } } }] } } },
  };
}

function parameters(route: AnyRoute, set: SchemaSet) {
  const list: Json[] = [];
  for (const [where, schema] of [
    ['path', route.params],
    ['query', route.query],
    ['header', route.headers],
  ] as const) {
    if (!schema) continue;
    const object = set.convert(schema, 'input', true) as { properties?: Record<string, Json>; required?: string[] };
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

function operation(route: AnyRoute, set: SchemaSet) {
  const access = security(route);
  const responses: Record<string, Json> = {};
  for (const [status, spec] of Object.entries(route.responses)) {
    responses[status] = response(spec, Number(status), set);
    // A failure body of the route's own (the licence portal's) names its codes in its `error` enum.
    const codes = ((responses[status].content as Json | undefined)?.['application/json'] as { schema?: { properties?: { error?: { enum?: unknown } } } })
      ?.schema?.properties?.error?.enum;
    if (Number(status) >= 400 && Array.isArray(codes)) responses[status]['x-error-codes'] = codes;
    if (Number(status) >= 400 && spec.errorCodes) responses[status]['x-error-codes'] = spec.errorCodes;
  }
  for (const [status, codes] of errorCodes(route, access.capability, access.signIn)) responses[status] ??= errorResponse(status, codes);
  // Answered by Node's HTTP parser before the application sees the request: no envelope, no headers.
  responses['431'] = { description: 'Request line or headers larger than the HTTP server accepts (no body)' };
  const bodyTypes = route.bodyTypes ?? ['json'];
  return {
    operationId: route.operationId,
    summary: route.summary,
    description: route.description,
    tags: [route.tag],
    security: access.security,
    ...(access.capability ? { 'x-capability': access.capability } : {}),
    parameters: parameters(route, set),
    ...(route.body
      ? {
          requestBody: {
            required: !route.bodyOptional,
            content: Object.fromEntries(
              bodyTypes.map((t) => [t === 'json' ? 'application/json' : 'application/x-www-form-urlencoded', { schema: set.convert(route.body!, 'input') }]),
            ),
          },
        }
      : {}),
    responses: Object.fromEntries(Object.entries(responses).sort(([a], [b]) => Number(a) - Number(b))),
  };
}

/** Builds the OpenAPI 3.1 document from the same route definitions that validate requests. */
export function buildOpenApi(routes: AnyRoute[], version: string) {
  const set = new SchemaSet();
  set.addFixed('Error', errorSchema);
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    if (!tags.some((t) => t.name === route.tag)) throw new Error(`Tag ${route.tag} of ${route.operationId} has no description in openapi.ts`);
    (paths[route.path] ??= {})[route.method] = operation(route, set);
  }
  const { schemas, rename } = set.finish();
  const named = Object.fromEntries(
    Object.keys(schemas)
      .sort()
      .map((name) => [name, schemas[name]!]),
  );
  const final = (value: unknown) =>
    walk(value, (node) => {
      const renamed = typeof node.$ref === 'string' ? { ...node, $ref: rename(node.$ref) } : node;
      return discriminate(renamed, named);
    });
  const components = final(named) as Record<string, Json>;
  return {
    openapi: '3.1.0',
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    info: {
      title: 'Workflow automation service',
      version,
      description:
        'Durable workflows on Temporal, a gated chat agent, a records store and licence endpoints. ' +
        'Success bodies are `{status: "ok", data}`; failures are `{status: "fail", error, message, data?}` (`Error`). ' +
        'Every answer carries `X-Request-Id`. The agent answers a streamed turn as `text/event-stream`, whose schema describes one event.',
    },
    servers: [{ url: '/', description: 'The service that serves this document (paths start with /api, /healthz or /readyz)' }],
    tags,
    paths: final(paths),
    components: {
      schemas: components,
      headers,
      securitySchemes: {
        applicationPassword: { type: 'http', scheme: 'basic', description: 'Login and an application password' },
        sessionCookie: { type: 'apiKey', in: 'cookie', name: 'svc_session', description: 'The session cookie that POST /api/auth/v1/login sets' },
        nonce: {
          type: 'apiKey',
          in: 'header',
          name: 'X-Svc-Nonce',
          description: 'A nonce of the session (login answers one, GET /api/auth/v1/nonce gives more)',
        },
      },
    },
  };
}
