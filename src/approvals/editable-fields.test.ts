import { describe, expect, it } from 'vitest';
import {
  applyEdits as applyEditsWith,
  checkInThisThread,
  editableSchemaProblem,
  editsFromForm,
  fieldInput,
  inputKindOf,
  type EditableSchema,
} from './editable-fields.js';

const schema: EditableSchema = {
  type: 'object',
  properties: {
    amount: { type: 'number', minimum: 0, maximum: 2000 },
    category: { enum: ['travel', 'training'] },
    refundable: { type: 'boolean' },
    note: { type: 'string', maxLength: 50 },
    tags: { type: 'array', items: { type: 'string' } },
  },
  required: ['amount'],
};

describe('editable schemas', () => {
  it('must be objects with properties that compile', () => {
    expect(editableSchemaProblem(schema)).toBeUndefined();
    expect(editableSchemaProblem({ type: 'string' })).toMatch(/"type": "object"/);
    expect(editableSchemaProblem({ type: 'object' })).toMatch(/properties/);
    expect(editableSchemaProblem({ type: 'object', properties: { a: { type: 'nope' } } })).toMatch(/not a valid JSON Schema/);
    expect(editableSchemaProblem([])).toMatch(/object/);
  });
});

// The schemas here are the test's own: checked on this thread.
const applyEdits = (...args: [EditableSchema | null, Record<string, unknown>, Record<string, unknown>]) => applyEditsWith(...args, checkInThisThread);

describe('an approver’s edits', () => {
  const current = { amount: 1800, purpose: 'Conference', category: 'travel' };

  it('are merged when the editable part still satisfies the schema', async () => {
    expect(await applyEdits(schema, current, { amount: 1500, refundable: true })).toEqual({ fields: { ...current, amount: 1500, refundable: true } });
  });

  it('name each field the schema refuses, or that is not editable', async () => {
    expect(await applyEdits(schema, current, { amount: 9000 })).toEqual({ problems: [{ field: 'fields.amount', message: expect.any(String) }] });
    expect(await applyEdits(schema, current, { category: 'holiday' })).toEqual({
      problems: [{ field: 'fields.category', message: expect.stringMatching(/travel/) }],
    });
    expect(await applyEdits(schema, current, { purpose: 'x' })).toEqual({
      problems: [{ field: 'fields.purpose', message: expect.stringMatching(/not editable/) }],
    });
    expect(await applyEdits(null, current, { amount: 1 })).toEqual({
      problems: [{ field: 'fields.amount', message: expect.stringMatching(/no editable fields/) }],
    });
    expect(await applyEdits(schema, {}, {})).toEqual({ problems: [{ field: 'fields.amount', message: 'is required' }] });
  });
});

describe('the page’s form', () => {
  it('shows each property with the input its type calls for', () => {
    expect(Object.values(schema.properties).map(inputKindOf)).toEqual(['number', 'select', 'checkbox', 'text', 'textarea']);
    expect(inputKindOf({ type: 'integer' })).toBe('integer');
    expect(inputKindOf({ type: 'string' })).toBe('textarea');
  });

  it('reads each input as its property’s type; a checkbox not sent is false, an empty number is left out', () => {
    const form = { [fieldInput(0)]: '1500.5', [fieldInput(1)]: 'training', [fieldInput(3)]: 'hello', [fieldInput(4)]: '["a","b"]' };
    expect(editsFromForm(schema, form)).toEqual({ amount: 1500.5, category: 'training', refundable: false, note: 'hello', tags: ['a', 'b'] });
    expect(editsFromForm(schema, { [fieldInput(0)]: '', [fieldInput(2)]: 'true' })).toEqual({ refundable: true });
    // What does not read as its type stays as sent, for the schema to name.
    expect(editsFromForm(schema, { [fieldInput(0)]: 'lots' }).amount).toBe('lots');
    expect(editsFromForm(null, { [fieldInput(0)]: '1' })).toEqual({});
  });
});
