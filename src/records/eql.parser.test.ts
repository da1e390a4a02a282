import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AppError } from '../platform/errors.js';
import { withoutPositions, type Expr, type Value } from './eql.ast.js';
import { KEYWORDS, MAX_EQL_LENGTH } from './eql.lexer.js';
import { MAX_EQL_DEPTH, parseEql } from './eql.parser.js';
import { printEql } from './eql.printer.js';

const parse = (source: string) => withoutPositions(parseEql(source));

/** The error a parse raises, checked to be a 400 invalid_eql. */
function failure(source: string): { position: number; reason: string; message: string } {
  try {
    parseEql(source);
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    const e = err as AppError;
    expect([e.status, e.code]).toEqual([400, 'invalid_eql']);
    return { ...(e.data as { position: number; reason: string }), message: e.message };
  }
  throw new Error(`expected ${JSON.stringify(source)} to be refused`);
}

const cmp = (name: string, op: string, value: unknown) => ({ kind: 'compare', field: { path: name.split('.') }, op, value });
const str = (value: string) => ({ type: 'string', value });
const num = (value: number) => ({ type: 'number', value });

describe('EQL grammar', () => {
  it('parses every comparison operator', () => {
    for (const op of ['=', '!=', '<', '<=', '>', '>=', '~', '!~']) {
      expect(parse(`age ${op} 3`)).toEqual(cmp('age', op, num(3)));
    }
    expect(parse('age<=3')).toEqual(cmp('age', '<=', num(3)));
  });

  it('parses in, not in, is null and is not null', () => {
    expect(parse("stage in ('a', 'b')")).toEqual({ kind: 'in', field: { path: ['stage'] }, negated: false, values: [str('a'), str('b')] });
    expect(parse('age not in (1,2.5,-3)')).toEqual({ kind: 'in', field: { path: ['age'] }, negated: true, values: [num(1), num(2.5), num(-3)] });
    expect(parse('email is null')).toEqual({ kind: 'is_null', field: { path: ['email'] }, negated: false });
    expect(parse('email is not null')).toEqual({ kind: 'is_null', field: { path: ['email'] }, negated: true });
  });

  it('reads values: quoted strings, numbers with exponents, true, false, null', () => {
    expect(parse('a = "x"')).toEqual(cmp('a', '=', str('x')));
    expect(parse('a = 1.5e3')).toEqual(cmp('a', '=', num(1500)));
    expect(parse('a = -0.25')).toEqual(cmp('a', '=', num(-0.25)));
    expect(parse('a = TRUE')).toEqual(cmp('a', '=', { type: 'boolean', value: true }));
    expect(parse('a != false')).toEqual(cmp('a', '!=', { type: 'boolean', value: false }));
    expect(parse('a = Null')).toEqual(cmp('a', '=', { type: 'null' }));
  });

  it('handles backslash escapes in both quote styles', () => {
    expect(parse(String.raw`a = 'it\'s'`)).toEqual(cmp('a', '=', str("it's")));
    expect(parse(String.raw`a = "say \"hi\""`)).toEqual(cmp('a', '=', str('say "hi"')));
    expect(parse(String.raw`a = 'back\\slash \n \t \u00e9'`)).toEqual(cmp('a', '=', str('back\\slash \n \t é')));
    expect(parse(`a = 'double " inside single'`)).toEqual(cmp('a', '=', str('double " inside single')));
  });

  it('parses one relation hop', () => {
    expect(parse("company.name = 'Acme'")).toEqual(cmp('company.name', '=', str('Acme')));
  });

  it('gives not > and > or precedence, left-associative', () => {
    const a = cmp('a', '=', num(1));
    const b = cmp('b', '=', num(2));
    const c = cmp('c', '=', num(3));
    expect(parse('a = 1 or b = 2 and c = 3')).toEqual({ kind: 'or', left: a, right: { kind: 'and', left: b, right: c } });
    expect(parse('a = 1 and b = 2 or c = 3')).toEqual({ kind: 'or', left: { kind: 'and', left: a, right: b }, right: c });
    expect(parse('(a = 1 or b = 2) and c = 3')).toEqual({ kind: 'and', left: { kind: 'or', left: a, right: b }, right: c });
    expect(parse('not a = 1 and b = 2')).toEqual({ kind: 'and', left: { kind: 'not', operand: a }, right: b });
    expect(parse('not (a = 1 and b = 2)')).toEqual({ kind: 'not', operand: { kind: 'and', left: a, right: b } });
    expect(parse('a = 1 or b = 2 or c = 3')).toEqual({ kind: 'or', left: { kind: 'or', left: a, right: b }, right: c });
  });

  it('reads :name parameters wherever a value goes', () => {
    const param = (name: string) => ({ type: 'param', name });
    expect(parse('order_id = :order_id')).toEqual(cmp('order_id', '=', param('order_id')));
    expect(parse('a>=:_min2')).toEqual(cmp('a', '>=', param('_min2')));
    expect(parse("stage in (:first, 'b', :rest)")).toEqual({
      kind: 'in',
      field: { path: ['stage'] },
      negated: false,
      values: [param('first'), str('b'), param('rest')],
    });
    expect(parse('company.name ~ :q')).toEqual(cmp('company.name', '~', param('q')));
  });

  it('reads keywords in any case, but field names as written', () => {
    expect(parse("A = 1 AnD b In ('x') oR NOT c IS NOT NULL")).toEqual(parse("A = 1 and b in ('x') or not c is not null"));
    expect(parse('Age = 1')).toEqual(cmp('Age', '=', num(1)));
  });
});

describe('EQL errors carry the position of the problem', () => {
  const cases: [string, number, RegExp][] = [
    ['', 0, /empty/],
    ['age', 3, /expected an operator/],
    ['age = ', 6, /expected a value/],
    ['age == 1', 5, /expected a value/],
    ["name = 'open", 7, /unterminated string/],
    [String.raw`name = 'a\qb'`, 9, /unknown escape/],
    [String.raw`name = '\u12'`, 8, /\\u escape/],
    ['age = 1 name = 2', 8, /after a complete condition/],
    ['(age = 1', 8, /expected '\)'/],
    ['age = 1)', 7, /after a complete condition/],
    ['age in 1', 7, /expected '\('/],
    ['age not like 1', 8, /expected 'in'/],
    ['age is nothing', 7, /expected 'null'/],
    ['a.b.c = 1', 3, /one relation hop/],
    ['age = 1 and', 11, /expected a field name/],
    ['age = 12abc', 6, /malformed number/],
    ['age = 1e999', 6, /out of range/],
    ['age # 1', 4, /unexpected character/],
    ["'x' = age", 0, /expected a field name/],
    ['age = :', 6, /expected a parameter name after ':'/],
    ['age = :1x', 6, /expected a parameter name/],
    [':field = 1', 0, /:field stands where a field name goes; parameters stand only for values/],
    ['company.:name = 1', 8, /:name stands where a field name goes/],
    ['age :op 1', 4, /:op stands where an operator goes/],
    ['age is :x', 7, /is takes only null, not the parameter :x/],
    ['age is not :x', 11, /is not takes only null/],
    ['age = 1 :more', 8, /unexpected the parameter :more after a complete condition/],
  ];
  it.each(cases)('%j at %i', (source, position, reason) => {
    const error = failure(source);
    expect(error.position).toBe(position);
    expect(error.reason).toMatch(reason);
    expect(error.message).toContain(`position ${position}`);
  });

  it('counts positions in characters, not UTF-16 code units', () => {
    expect(failure("name = '😀😀' #").position).toBe(12);
  });

  it('refuses input longer than the limit and nesting deeper than the limit', () => {
    expect(failure(`a = '${'x'.repeat(MAX_EQL_LENGTH)}'`).reason).toMatch(/longer than/);
    const deep = `${'('.repeat(MAX_EQL_DEPTH + 1)}a = 1${')'.repeat(MAX_EQL_DEPTH + 1)}`;
    expect(failure(deep)).toMatchObject({ position: MAX_EQL_DEPTH, reason: expect.stringMatching(/nested deeper/) });
    expect(failure(`${'not '.repeat(MAX_EQL_DEPTH + 1)}a = 1`).reason).toMatch(/nested deeper/);
    expect(() => parseEql(`${'('.repeat(MAX_EQL_DEPTH)}a = 1${')'.repeat(MAX_EQL_DEPTH)}`)).not.toThrow();
  });
});

// Trees as the parser builds them: names that are not keywords, any string, any finite number.
const fieldName = fc.stringMatching(/^[a-z][a-z0-9_]{0,8}$/).filter((s) => !(KEYWORDS as readonly string[]).includes(s));
const fieldRef = fc.oneof(
  fc.tuple(fieldName).map((p) => ({ path: p as [string], pos: 0 })),
  fc.tuple(fieldName, fieldName).map((p) => ({ path: p as [string, string], pos: 0 })),
);
const literal: fc.Arbitrary<Value> = fc.oneof(
  fieldName.map((name) => ({ type: 'param' as const, name, pos: 0 })),
  fc.string({ unit: 'binary' }).map((value) => ({ type: 'string' as const, value, pos: 0 })),
  fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true })).map((value) => ({ type: 'number' as const, value, pos: 0 })),
  fc.boolean().map((value) => ({ type: 'boolean' as const, value, pos: 0 })),
  fc.constant({ type: 'null' as const, pos: 0 }),
);
const { expr } = fc.letrec<{ expr: Expr; leaf: Expr }>((tie) => ({
  leaf: fc.oneof(
    fc.record({
      kind: fc.constant('compare' as const),
      field: fieldRef,
      op: fc.constantFrom('=', '!=', '<', '<=', '>', '>=', '~', '!~' as const),
      value: literal,
      pos: fc.constant(0),
    }),
    fc.record({
      kind: fc.constant('in' as const),
      field: fieldRef,
      negated: fc.boolean(),
      values: fc.array(literal, { minLength: 1, maxLength: 4 }),
      pos: fc.constant(0),
    }),
    fc.record({ kind: fc.constant('is_null' as const), field: fieldRef, negated: fc.boolean(), pos: fc.constant(0) }),
  ),
  expr: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    tie('leaf'),
    fc.record({ kind: fc.constantFrom('and' as const, 'or' as const), left: tie('expr'), right: tie('expr'), pos: fc.constant(0) }),
    fc.record({ kind: fc.constant('not' as const), operand: tie('expr'), pos: fc.constant(0) }),
  ),
}));

describe('EQL printer', () => {
  it('prints any tree as text that parses back to the same tree', () => {
    fc.assert(
      fc.property(expr, (tree) => {
        const text = printEql(tree);
        fc.pre(text.length <= MAX_EQL_LENGTH);
        expect(parse(text)).toEqual(withoutPositions(tree));
      }),
      { numRuns: 500 },
    );
  });

  it('is stable: printing a parsed expression and parsing it again changes nothing', () => {
    const source = `NOT (a = 'x' Or b.c != "y\\"z") AND d IN (1, 2) or e is not null`;
    const once = printEql(parseEql(source));
    expect(printEql(parseEql(once))).toBe(once);
    expect(once).toBe(`not (a = 'x' or b.c != 'y"z') and d in (1, 2) or e is not null`);
    expect(printEql(parseEql('a=:x and b in (:ys,2)'))).toBe('a = :x and b in (:ys, 2)');
  });
});
