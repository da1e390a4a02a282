import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import * as addFormatsModule from 'ajv-formats';
import { validationFailed, type FieldProblem } from '../platform/errors.js';
import type { StoredEntity } from './entity.service.js';
import { recordJsonSchema } from './json-schema.js';
import { SYSTEM_COLUMNS } from './naming.js';

// ajv-formats is CommonJS; under ESM its function arrives as the namespace's default.
const addFormats = (addFormatsModule as unknown as { default: (ajv: Ajv2020) => void }).default;

/** Compiled validators are costly to build; keep the most recent ones. */
const CACHE_SIZE = 500;

function problemOf(error: ErrorObject): FieldProblem {
  if (error.keyword === 'required') return { field: String(error.params.missingProperty), message: 'is required' };
  if (error.keyword === 'additionalProperties') return { field: String(error.params.additionalProperty), message: 'is not a field of this entity' };
  const field = error.instancePath.split('/')[1] ?? 'body';
  if (error.keyword === 'enum') {
    const allowed = (error.params.allowedValues as unknown[]).filter((v) => v !== null).map((v) => JSON.stringify(v));
    return { field, message: `must be one of ${allowed.join(', ')}` };
  }
  return { field, message: error.message ?? 'is invalid' };
}

/**
 * Validates record writes against the entity's JSON Schema (the one GET /entities/{slug}/schema
 * serves), reporting every failing field at once.
 */
export class RecordValidator {
  private readonly ajv = new Ajv2020({ allErrors: true, strict: true });
  private readonly cache = new Map<string, ValidateFunction>();

  constructor() {
    addFormats(this.ajv);
  }

  private validator(entity: StoredEntity, partial: boolean): ValidateFunction {
    // The catalogue's updated_at changes with every definition change, so stale entries never match.
    const key = `${entity.definition.slug}@${entity.updatedAt}@${partial}`;
    let validate = this.cache.get(key);
    if (!validate) {
      validate = this.ajv.compile(recordJsonSchema(entity.definition, { partial }));
      if (this.cache.size >= CACHE_SIZE) this.cache.delete(this.cache.keys().next().value!);
      this.cache.set(key, validate);
    }
    return validate;
  }

  /** Throws 400 validation_failed listing each problem; `partial` is for updates. */
  check(entity: StoredEntity, body: Record<string, unknown>, partial: boolean): void {
    const problems: FieldProblem[] = [];
    for (const name of SYSTEM_COLUMNS) if (Object.hasOwn(body, name)) problems.push({ field: name, message: 'is read-only' });
    const validate = this.validator(entity, partial);
    if (!validate(body)) problems.push(...validate.errors!.map(problemOf).filter((p) => !(SYSTEM_COLUMNS as readonly string[]).includes(p.field)));
    const unique = [...new Map(problems.map((p) => [`${p.field}\u0000${p.message}`, p])).values()];
    if (unique.length) throw validationFailed(unique);
  }
}
