import type { CompareOp, Expr, FieldRef, Value } from './eql.ast.js';
import { invalidEql, tokenize, type Keyword, type Token } from './eql.lexer.js';

/**
 * Hand-written recursive-descent parser of EQL. Grammar (keywords case-insensitive; precedence
 * not > and > or; and/or associate to the left):
 *
 *   expression := or_expr END
 *   or_expr    := and_expr ("or" and_expr)*
 *   and_expr   := unary ("and" unary)*
 *   unary      := "not" unary | "(" or_expr ")" | predicate
 *   predicate  := field ( op value | ["not"] "in" "(" value ("," value)* ")" | "is" ["not"] "null" )
 *   field      := identifier ["." identifier]
 *   op         := "=" | "!=" | "<" | "<=" | ">" | ">=" | "~" | "!~"
 *   value      := string | number | "true" | "false" | "null" | param
 *   param      := ":" identifier      -- bound from the parameters, never spliced into the text
 */

/** Deepest nesting of parentheses and `not` accepted. */
export const MAX_EQL_DEPTH = 32;
/** Most values in one `in (...)` list. */
export const MAX_IN_VALUES = 500;

function describe(token: Token): string {
  switch (token.kind) {
    case 'identifier':
      return `'${token.name}'`;
    case 'keyword':
      return `'${token.keyword}'`;
    case 'string':
      return 'a string';
    case 'number':
      return 'a number';
    case 'param':
      return `the parameter :${token.name}`;
    case 'operator':
      return `'${token.op}'`;
    case 'punct':
      return `'${token.char}'`;
    case 'end':
      return 'the end of the expression';
  }
}

class Parser {
  private index = 0;
  private depth = 0;

  constructor(
    private readonly source: string,
    private readonly tokens: Token[],
  ) {}

  private get current(): Token {
    return this.tokens[this.index]!;
  }

  private fail(token: Token, message: string): never {
    throw invalidEql(this.source, token.pos, message);
  }

  private isKeyword(keyword: Keyword, token = this.current): boolean {
    return token.kind === 'keyword' && token.keyword === keyword;
  }

  private expectKeyword(keyword: Keyword): void {
    if (!this.isKeyword(keyword)) this.fail(this.current, `expected '${keyword}' but found ${describe(this.current)}`);
    this.index += 1;
  }

  private expectPunct(char: '(' | ')' | ','): void {
    const token = this.current;
    if (token.kind !== 'punct' || token.char !== char) this.fail(token, `expected '${char}' but found ${describe(token)}`);
    this.index += 1;
  }

  private enter(token: Token): void {
    if (++this.depth > MAX_EQL_DEPTH) this.fail(token, `nested deeper than ${MAX_EQL_DEPTH} levels`);
  }

  parse(): Expr {
    if (this.current.kind === 'end') this.fail(this.current, 'empty expression');
    const expr = this.orExpr();
    const rest: Token = this.tokens[this.index]!;
    if (rest.kind !== 'end') this.fail(rest, `unexpected ${describe(rest)} after a complete condition (missing 'and' or 'or'?)`);
    return expr;
  }

  private orExpr(): Expr {
    let left = this.andExpr();
    while (this.isKeyword('or')) {
      this.index += 1;
      left = { kind: 'or', left, right: this.andExpr(), pos: left.pos };
    }
    return left;
  }

  private andExpr(): Expr {
    let left = this.unary();
    while (this.isKeyword('and')) {
      this.index += 1;
      left = { kind: 'and', left, right: this.unary(), pos: left.pos };
    }
    return left;
  }

  private unary(): Expr {
    const token = this.current;
    if (this.isKeyword('not')) {
      this.enter(token);
      this.index += 1;
      const operand = this.unary();
      this.depth -= 1;
      return { kind: 'not', operand, pos: token.pos };
    }
    if (token.kind === 'punct' && token.char === '(') {
      this.enter(token);
      this.index += 1;
      const inner = this.orExpr();
      this.expectPunct(')');
      this.depth -= 1;
      return inner;
    }
    return this.predicate();
  }

  private field(): FieldRef {
    const first = this.current;
    if (first.kind === 'param') this.fail(first, `the parameter :${first.name} stands where a field name goes; parameters stand only for values`);
    if (first.kind !== 'identifier') this.fail(first, `expected a field name but found ${describe(first)}`);
    this.index += 1;
    const dot = this.current;
    if (dot.kind !== 'punct' || dot.char !== '.') return { path: [first.name], pos: first.pos };
    this.index += 1;
    const second = this.current;
    if (second.kind === 'param') this.fail(second, `the parameter :${second.name} stands where a field name goes; parameters stand only for values`);
    if (second.kind !== 'identifier') this.fail(second, `expected a field name after '.' but found ${describe(second)}`);
    this.index += 1;
    const more = this.current;
    if (more.kind === 'punct' && more.char === '.') this.fail(more, 'only one relation hop is allowed');
    return { path: [first.name, second.name], pos: first.pos };
  }

  private value(): Value {
    const token = this.current;
    this.index += 1;
    if (token.kind === 'param') return { type: 'param', name: token.name, pos: token.pos };
    if (token.kind === 'string') return { type: 'string', value: token.value, pos: token.pos };
    if (token.kind === 'number') return { type: 'number', value: token.value, pos: token.pos };
    if (token.kind === 'keyword' && (token.keyword === 'true' || token.keyword === 'false')) {
      return { type: 'boolean', value: token.keyword === 'true', pos: token.pos };
    }
    if (token.kind === 'keyword' && token.keyword === 'null') return { type: 'null', pos: token.pos };
    return this.fail(token, `expected a value (string, number, true, false, null or a :parameter) but found ${describe(token)}`);
  }

  private list(): Value[] {
    this.expectPunct('(');
    const values = [this.value()];
    while (this.current.kind === 'punct' && this.current.char === ',') {
      this.index += 1;
      if (values.length >= MAX_IN_VALUES) this.fail(this.current, `more than ${MAX_IN_VALUES} values in a list`);
      values.push(this.value());
    }
    this.expectPunct(')');
    return values;
  }

  private predicate(): Expr {
    const field = this.field();
    const token = this.current;
    if (token.kind === 'operator') {
      this.index += 1;
      return { kind: 'compare', field, op: token.op as CompareOp, value: this.value(), pos: field.pos };
    }
    if (this.isKeyword('in')) {
      this.index += 1;
      return { kind: 'in', field, negated: false, values: this.list(), pos: field.pos };
    }
    if (this.isKeyword('not')) {
      this.index += 1;
      this.expectKeyword('in');
      return { kind: 'in', field, negated: true, values: this.list(), pos: field.pos };
    }
    if (this.isKeyword('is')) {
      this.index += 1;
      const negated = this.isKeyword('not');
      if (negated) this.index += 1;
      const after = this.current;
      if (after.kind === 'param') this.fail(after, `is ${negated ? 'not ' : ''}takes only null, not the parameter :${after.name} (write = :${after.name})`);
      this.expectKeyword('null');
      return { kind: 'is_null', field, negated, pos: field.pos };
    }
    if (token.kind === 'param') this.fail(token, `the parameter :${token.name} stands where an operator goes; parameters stand only for values`);
    return this.fail(token, `expected an operator (=, !=, <, <=, >, >=, ~, !~, in, not in, is) but found ${describe(token)}`);
  }
}

/** Parses an EQL expression; throws 400 `invalid_eql` with the position of the first problem. */
export function parseEql(source: string): Expr {
  return new Parser(source, tokenize(source)).parse();
}
