import { Ajv2020 } from 'ajv/dist/2020.js';
import * as addFormatsModule from 'ajv-formats';
import type { ValidateFunction } from 'ajv';

// ajv-formats is CommonJS; under ESM its function arrives as the namespace's default.
const addFormats = (addFormatsModule as unknown as { default: (ajv: Ajv2020) => void }).default;

type Doc = { paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, unknown> }> }>> };

const escape = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

/** Checks real responses against the OpenAPI document the service serves. */
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
  check(method: string, path: string, status: number, contentType: string, body: unknown): string[] {
    const pathOnly = path.split('?')[0]!;
    const match = this.templates.find((t) => t.pattern.test(pathOnly));
    if (!match) return []; // unknown routes are the 404 envelope, checked by their own tests
    const operation = this.doc.paths[match.template]?.[method.toLowerCase()];
    if (!operation) return [];
    const response = operation.responses[String(status)];
    if (!response) return [`${method} ${match.template}: status ${status} is not documented`];
    const media = contentType.split(';')[0]!.trim() || 'application/json';
    if (!response.content?.[media]) return [`${method} ${match.template} ${status}: content type ${media} is not documented`];
    if (media !== 'application/json') return [];
    const pointer = `openapi#/paths/${escape(match.template)}/${method.toLowerCase()}/responses/${status}/content/${escape(media)}/schema`;
    let validate = this.cache.get(pointer);
    if (!validate) {
      validate = this.ajv.compile({ $ref: pointer });
      this.cache.set(pointer, validate);
    }
    if (validate(body)) return [];
    return (validate.errors ?? []).map((e) => `${method} ${match.template} ${status}: ${e.instancePath || '(body)'} ${e.message}`);
  }
}
