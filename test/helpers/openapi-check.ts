import { Ajv2020 } from 'ajv/dist/2020.js';
import * as addFormatsModule from 'ajv-formats';
import type { ValidateFunction } from 'ajv';

// ajv-formats is CommonJS; under ESM its function arrives as the namespace's default.
const addFormats = (addFormatsModule as unknown as { default: (ajv: Ajv2020) => void }).default;

type Schema = Record<string, unknown>;
type Header = { $ref?: string; required?: boolean; schema?: Schema };
type Response = { content?: Record<string, { schema?: Schema }>; headers?: Record<string, Header> };
type Doc = {
  paths: Record<string, Record<string, { responses: Record<string, Response> }>>;
  components?: { headers?: Record<string, Header> };
};

const escape = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

/** One server-sent event as a client's parser gives it: the event name and its data text. */
export interface ServerSentEvent {
  event: string;
  data: string;
  id?: string;
  retry?: number;
}

/** Parses a `text/event-stream` body (the fields this service writes: event, data, id, retry). */
export function parseEventStream(text: string): ServerSentEvent[] {
  const events: ServerSentEvent[] = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    const data: string[] = [];
    const event: Partial<ServerSentEvent> = {};
    for (const line of block.split(/\r?\n/)) {
      if (!line || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'data') data.push(value);
      else if (field === 'event') event.event = value;
      else if (field === 'id') event.id = value;
      else if (field === 'retry' && /^\d+$/.test(value)) event.retry = Number(value);
    }
    if (data.length) events.push({ ...event, event: event.event ?? 'message', data: data.join('\n') });
  }
  return events;
}

/**
 * Checks real responses against the OpenAPI document the service serves: the status, the content
 * type, the body (each event of an event stream, its data against the event's `contentSchema`),
 * and the headers the response declares as required.
 */
export class OpenApiChecker {
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
  private readonly templates: { template: string; pattern: RegExp }[];
  private readonly cache = new Map<string, ValidateFunction>();

  private readonly doc: Doc;

  constructor(document: unknown) {
    const doc = document as Doc;
    this.doc = doc;
    addFormats(this.ajv);
    this.ajv.addSchema(doc as object, 'openapi');
    // Literal segments win over parameters: sort so that `/x/_bulk` is tried before `/x/{id}`.
    this.templates = Object.keys(doc.paths)
      .sort((a, b) => b.replace(/\{[^}]+\}/g, '').length - a.replace(/\{[^}]+\}/g, '').length)
      .map((template) => ({
        template,
        pattern: new RegExp('^' + template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '[^/]+') + '$'),
      }));
  }

  /** Returns a list of problems; empty when the response is documented and matches. */
  check(method: string, path: string, status: number, contentType: string, body: unknown, headers?: Headers): string[] {
    const pathOnly = path.split('?')[0]!;
    const match = this.templates.find((t) => t.pattern.test(pathOnly));
    if (!match) return []; // unknown routes are the 404 envelope, checked by their own tests
    const operation = this.doc.paths[match.template]?.[method.toLowerCase()];
    if (!operation) return [];
    const label = `${method} ${match.template} ${status}`;
    const response = operation.responses[String(status)];
    if (!response) return [`${method} ${match.template}: status ${status} is not documented`];
    const problems = headers ? this.checkHeaders(label, response, headers) : [];
    const media = contentType.split(';')[0]!.trim() || 'application/json';
    if (!response.content?.[media]) return [...problems, `${label}: content type ${media} is not documented`];
    const pointer = `openapi#/paths/${escape(match.template)}/${method.toLowerCase()}/responses/${status}/content/${escape(media)}/schema`;
    if (media === 'application/json') return [...problems, ...this.validate(label, pointer, body)];
    if (media === 'text/event-stream') return [...problems, ...this.checkEvents(label, pointer, response.content[media]!.schema, String(body))];
    return problems;
  }

  private validator(schema: Schema | string): ValidateFunction {
    const key = typeof schema === 'string' ? schema : JSON.stringify(schema);
    let validate = this.cache.get(key);
    if (!validate) {
      validate = this.ajv.compile(typeof schema === 'string' ? { $ref: schema } : schema);
      this.cache.set(key, validate);
    }
    return validate;
  }

  private validate(label: string, schema: Schema | string, value: unknown): string[] {
    const validate = this.validator(schema);
    if (validate(value)) return [];
    return (validate.errors ?? []).map((e) => `${label}: ${e.instancePath || '(body)'} ${e.message}`);
  }

  private resolve<T>(node: T & { $ref?: string }): T {
    if (typeof node?.$ref !== 'string' || !node.$ref.startsWith('#/')) return node;
    const target = node.$ref
      .slice(2)
      .split('/')
      .reduce<unknown>((at, part) => (at as Record<string, unknown>)?.[part.replace(/~1/g, '/').replace(/~0/g, '~')], this.doc);
    return this.resolve(target as T & { $ref?: string });
  }

  private checkHeaders(label: string, response: Response, headers: Headers): string[] {
    const problems: string[] = [];
    for (const [name, declared] of Object.entries(response.headers ?? {})) {
      const header = this.resolve(declared);
      const value = headers.get(name);
      if (value === null) {
        if (header.required) problems.push(`${label}: required header ${name} is missing`);
        continue;
      }
      if (header.schema) problems.push(...this.validate(`${label} header ${name}`, header.schema, value));
    }
    return problems;
  }

  /**
   * Each event against the schema of one event (`{event, data}`, data the JSON text), then its
   * data, parsed, against the `contentSchema` of the event's branch.
   */
  private checkEvents(label: string, pointer: string, schema: Schema | undefined, text: string): string[] {
    const events = parseEventStream(text);
    if (!events.length) return [`${label}: the event stream carries no event`];
    const branches = ((this.resolve(schema ?? {}) as { oneOf?: Schema[] }).oneOf ?? [schema ?? {}]).map((b) => this.resolve(b));
    const problems: string[] = [];
    events.forEach((event, i) => {
      const at = `${label} event ${i} (${event.event})`;
      problems.push(...this.validate(at, pointer, event));
      const branch = branches.find((b) => (b.properties as Record<string, Schema> | undefined)?.event?.const === event.event);
      const data = (branch?.properties as Record<string, Schema> | undefined)?.data;
      if (!data?.contentSchema || data.contentMediaType !== 'application/json') return;
      let parsed: unknown;
      try {
        parsed = JSON.parse(event.data);
      } catch {
        problems.push(`${at}: data is not JSON`);
        return;
      }
      const contentSchema = JSON.parse(JSON.stringify(data.contentSchema).replace(/"\$ref":"#\//g, '"$ref":"openapi#/')) as Schema;
      problems.push(...this.validate(`${at} data`, contentSchema, parsed));
    });
    return problems;
  }
}
