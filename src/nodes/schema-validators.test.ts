import { describe, expect, it } from 'vitest';
import { schemaValidators } from './schema-validators.mjs';

const idSchema = (id: string, type: string) => ({ $id: id, type: 'object', properties: { v: { type } }, required: ['v'] });

describe('schemaValidators', () => {
  it('compiles a schema once and answers the same validator for the same schema', () => {
    const { validatorOf } = schemaValidators();
    const first = validatorOf({ type: 'string', format: 'email' });
    expect(validatorOf({ type: 'string', format: 'email' })).toBe(first);
    expect(first('a@example.test')).toBe(true);
    expect(first('not an address')).toBe(false);
  });

  it('lets two different schemas carry the same $id, each checked by its own rules', () => {
    const { validatorOf } = schemaValidators();
    const numbers = validatorOf(idSchema('https://schemas.test/value', 'number'));
    const strings = validatorOf(idSchema('https://schemas.test/value', 'string'));
    expect([numbers({ v: 1 }), numbers({ v: 'x' })]).toEqual([true, false]);
    expect([strings({ v: 'x' }), strings({ v: 1 })]).toEqual([true, false]);
  });

  it('lets two different schemas carry the same nested absolute $id', () => {
    const nested = (type: string) => ({ type: 'object', properties: { v: { $id: 'https://schemas.test/nested', type } } });
    const { validatorOf } = schemaValidators();
    const numbers = validatorOf(nested('number'));
    const strings = validatorOf(nested('string'));
    expect([numbers({ v: 1 }), numbers({ v: 'x' })]).toEqual([true, false]);
    expect([strings({ v: 'x' }), strings({ v: 1 })]).toEqual([true, false]);
  });

  it('compiles a schema with a $id again once the cache has let it go, and keeps answering over many schemas', () => {
    const { validatorOf } = schemaValidators();
    const schema = idSchema('https://schemas.test/evicted', 'integer');
    const before = validatorOf(schema);
    // More distinct schemas than the cache keeps, and than one Ajv instance compiles.
    for (let i = 0; i < 900; i++) expect(validatorOf({ type: 'integer', minimum: i })(i)).toBe(true);
    const after = validatorOf(structuredClone(schema));
    expect(after).not.toBe(before);
    expect([after({ v: 2 }), after({ v: 2.5 })]).toEqual([true, false]);
  });

  it('still refuses a schema that is not a valid JSON Schema', () => {
    const { validatorOf } = schemaValidators();
    validatorOf({ type: 'string' });
    expect(() => validatorOf({ type: 'no-such-type' })).toThrow();
  });
});
