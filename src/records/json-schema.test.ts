import { Ajv2020 } from 'ajv/dist/2020.js';
import * as addFormatsModule from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { normalise } from './entity-definition.js';
import { recordJsonSchema } from './json-schema.js';

const addFormats = (addFormatsModule as unknown as { default: (ajv: Ajv2020) => void }).default;

const contact = normalise({
  slug: 'contact',
  name: 'Contact',
  schema: {
    fields: {
      email: { type: 'string', format: 'email', required: true, max_length: 20 },
      age: { type: 'integer', min: 0 },
      vip: { type: 'boolean', default: false, required: true },
      stage: { type: 'enum', values: ['lead', 'customer'] },
      born_on: { type: 'date' },
      company: { type: 'relation', entity: 'company' },
      meta: { type: 'json' },
    },
  },
});

describe('record JSON Schema', () => {
  const ajv = new Ajv2020({ allErrors: true, strict: true });
  addFormats(ajv);

  it('is a valid draft 2020-12 schema that compiles in strict mode', () => {
    const schema = recordJsonSchema(contact);
    expect(ajv.validateSchema(schema)).toBe(true);
    expect(schema.required).toEqual(['email']);
  });

  it('accepts a good record and names every bad field', () => {
    const validate = ajv.compile(recordJsonSchema(contact));
    expect(validate({ email: 'a@b.co', age: 3, stage: null, meta: { any: [1] }, company: '0b6a3f7e-1111-4222-8333-944455556666' })).toBe(true);
    expect(validate({ email: 'not-an-email', age: -1, stage: 'x', born_on: '2023-02-30', vip: null, company: 'x', extra: 1 })).toBe(false);
    const fields = new Set(validate.errors!.map((e) => e.instancePath || e.params.additionalProperty));
    expect(fields).toEqual(new Set(['/email', '/age', '/stage', '/born_on', '/vip', '/company', 'extra']));
  });

  it('has a partial variant without required fields, for updates', () => {
    const validate = ajv.compile(recordJsonSchema(contact, { partial: true }));
    expect(validate({ age: 4 })).toBe(true);
    expect(validate({ email: null })).toBe(false);
  });
});
