import { fieldNamed, type EntityDefinition, type FieldDefinition } from './entity-definition.js';
import type { CompareOp, Expr, FieldRef, Literal, Value } from './eql.ast.js';
import { invalidEql } from './eql.lexer.js';
import { MAX_IN_VALUES } from './eql.parser.js';
import { ident, qualifiedTable } from './naming.js';
import type { FieldProblem } from '../platform/errors.js';

/**
 * Type-checks an EQL tree against an entity and compiles it to a parameterised SQL condition.
 * Identifiers come only from the entity definitions; every value is a `$n` parameter, whether it
 * was written in the expression or bound to a `:name` from `params`.
 *
 * Null semantics are two-valued: a positive comparison never matches a missing value, and its
 * negation (`!=`, `!~`, `not in`, `not (...)`) always does, so `not x` is exactly the rows `x`
 * does not match.
 */

export interface CompileContext {
  entity: EntityDefinition;
  /** Alias of the entity's table in the surrounding query. */
  alias: string;
  /** Definitions of related entities, for relation hops (`company.name`). */
  related: (slug: string) => EntityDefinition | undefined;
  /** Parameters already bound before this condition. */
  paramOffset?: number;
  /**
   * Values of the expression's `:name` parameters. Each is checked against its field exactly as a
   * literal there would be; an array stands for its items inside `in (...)` only.
   */
  params?: Readonly<Record<string, unknown>>;
}

export interface CompiledFilter {
  sql: string;
  params: unknown[];
}

type ValueKind = FieldDefinition['type'];

interface Resolved {
  column: string;
  kind: ValueKind;
  field?: FieldDefinition;
  label: string;
  /** Set for a relation hop: the condition goes inside EXISTS on the related table. */
  hop?: { relationColumn: string; target: string };
}

type BasicOp = '=' | '<' | '<=' | '>' | '>=' | '~' | 'in' | 'is_null';

const systemKinds: Record<string, ValueKind> = { uuid: 'uuid', created_at: 'datetime', updated_at: 'datetime' };
const allowed: Record<ValueKind, BasicOp[]> = {
  string: ['=', '<', '<=', '>', '>=', '~', 'in'],
  enum: ['=', 'in'],
  integer: ['=', '<', '<=', '>', '>=', 'in'],
  number: ['=', '<', '<=', '>', '>=', 'in'],
  boolean: ['='],
  date: ['=', '<', '<=', '>', '>=', 'in'],
  datetime: ['=', '<', '<=', '>', '>=', 'in'],
  json: [],
  relation: ['=', 'in'],
  uuid: ['=', 'in'],
};

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const datePattern = /^\d{4}-\d{2}-\d{2}$/;
const dateTimePattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})$/i;
const validDate = (s: string) => datePattern.test(s) && new Date(`${s}T00:00:00Z`).toISOString().startsWith(s);

const printOp = (op: BasicOp, negated: boolean): string =>
  op === 'in' ? (negated ? 'not in' : 'in') : op === 'is_null' ? 'is null' : negated ? (op === '=' ? '!=' : op === '~' ? '!~' : `not ${op}`) : op;

class Compiler {
  readonly params: unknown[] = [];

  constructor(
    private readonly source: string,
    private readonly ctx: CompileContext,
  ) {}

  private fail(pos: number, message: string): never {
    throw invalidEql(this.source, pos, message);
  }

  private bind(value: unknown): string {
    this.params.push(value);
    return `$${(this.ctx.paramOffset ?? 0) + this.params.length}`;
  }

  private lookup(def: EntityDefinition, name: string, alias: string, ref: FieldRef, label: string): Omit<Resolved, 'hop'> {
    const system = Object.hasOwn(systemKinds, name) ? systemKinds[name] : undefined;
    if (system) return { column: `${alias}.${ident(name)}`, kind: system, label };
    const field = fieldNamed(def.schema.fields, name);
    if (!field) this.fail(ref.pos, `unknown field ${label} on ${def.slug}`);
    return { column: `${alias}.${ident(name)}`, kind: field.type, field, label };
  }

  private resolve(ref: FieldRef): Resolved {
    const [first, second] = ref.path;
    const own = this.lookup(this.ctx.entity, first, this.ctx.alias, ref, first);
    if (second === undefined) return own;
    if (own.field?.type !== 'relation') this.fail(ref.pos, `${first} is not a relation, so ${first}.${second} is not a field`);
    const target = this.ctx.related(own.field.entity);
    if (!target) this.fail(ref.pos, `the entity ${own.field.entity} of ${first} no longer exists`);
    return { ...this.lookup(target, second, 'r', ref, `${first}.${second}`), hop: { relationColumn: own.column, target: target.slug } };
  }

  /** Checks one value against the field type and returns the parameter to bind. */
  private value(field: Resolved, literal: Literal): unknown {
    const want = (what: string): never => this.fail(literal.pos, `${field.label} takes ${what}`);
    const str = () => {
      if (literal.type !== 'string') want(`a quoted ${field.kind === 'date' ? 'date' : field.kind === 'datetime' ? 'date-time' : 'string'}`);
      const value = (literal as { value: string }).value;
      if (value.includes('\u0000')) this.fail(literal.pos, 'strings may not contain NUL');
      return value;
    };
    switch (field.kind) {
      case 'string':
        return str();
      case 'enum': {
        const value = str();
        const values = field.field?.type === 'enum' ? field.field.values : [];
        if (!values.includes(value)) this.fail(literal.pos, `${field.label} is one of ${values.map((v) => JSON.stringify(v)).join(', ')}`);
        return value;
      }
      case 'integer':
        if (literal.type !== 'number' || !Number.isSafeInteger(literal.value)) want('an integer');
        return (literal as { value: number }).value;
      case 'number':
        if (literal.type !== 'number') want('a number');
        return (literal as { value: number }).value;
      case 'boolean':
        if (literal.type !== 'boolean') want('true or false');
        return (literal as { value: boolean }).value;
      case 'date': {
        const value = str();
        if (!validDate(value)) want("a date such as '2024-12-31'");
        return value;
      }
      case 'datetime': {
        const value = str();
        if (validDate(value)) return `${value}T00:00:00Z`;
        if (!dateTimePattern.test(value) || Number.isNaN(Date.parse(value))) want("a date-time with offset such as '2024-12-31T23:59:00Z'");
        return value;
      }
      case 'relation':
      case 'uuid': {
        const value = str();
        if (!uuidPattern.test(value)) want('a uuid');
        return value;
      }
      case 'json':
        return want('no values (only is null / is not null)');
    }
  }

  /** One bound parameter as the literal it stands for (a list parameter, inside `in`, as its items). */
  private bound(value: Value, inList: boolean): Literal[] {
    if (value.type !== 'param') return [value];
    const params = this.ctx.params ?? {};
    if (!Object.hasOwn(params, value.name)) this.fail(value.pos, `no value for the parameter :${value.name} (params has no ${value.name})`);
    const given = params[value.name];
    const one = (v: unknown): Literal => {
      const pos = value.pos;
      if (typeof v === 'string') return { type: 'string', value: v, pos };
      if (typeof v === 'boolean') return { type: 'boolean', value: v, pos };
      if (v === null) return { type: 'null', pos };
      if (typeof v === 'number' && Number.isFinite(v)) return { type: 'number', value: v, pos };
      const what = Array.isArray(v)
        ? 'a list'
        : typeof v === 'number'
          ? 'not a finite number'
          : v === undefined
            ? 'undefined'
            : `a${typeof v === 'object' ? 'n object' : ` ${typeof v}`}`;
      return this.fail(
        pos,
        `the parameter :${value.name} is ${what}; a parameter is a string, a number, true, false or null${inList ? '' : ' (a list only inside in (...))'}`,
      );
    };
    if (!inList || !Array.isArray(given)) return [one(given)];
    if (given.length > MAX_IN_VALUES) this.fail(value.pos, `the parameter :${value.name} holds more than ${MAX_IN_VALUES} values`);
    return given.map(one);
  }

  /** A predicate: `op` and whether it is negated (`!=` is the negation of `=`, and so on). */
  private predicate(field: Resolved, op: BasicOp, values: Literal[], negated: boolean, pos: number): string {
    if (op !== 'is_null' && !allowed[field.kind].includes(op)) {
      this.fail(pos, `operator ${printOp(op, negated)} does not apply to ${field.label} (${field.kind})`);
    }
    if (op === 'in') {
      const nullValue = values.find((v) => v.type === 'null');
      if (nullValue) this.fail(nullValue.pos, 'null cannot be in a list; add "or field is null"');
    }
    let positive: string;
    if (op === 'is_null') positive = `${field.column} is null`;
    // A list parameter may be empty: the list then matches nothing.
    else if (op === 'in' && values.length === 0) positive = 'false';
    else if (op === 'in') positive = `${field.column} in (${values.map((v) => this.bind(this.value(field, v))).join(', ')})`;
    else if (op === '~') positive = `${field.column} ilike ${this.bind(`%${(this.value(field, values[0]!) as string).replace(/[\\%_]/g, '\\$&')}%`)}`;
    else positive = `${field.column} ${op} ${this.bind(this.value(field, values[0]!))}`;
    if (field.hop) {
      const exists = `exists (select 1 from ${qualifiedTable(field.hop.target)} r where r."uuid" = ${field.hop.relationColumn} and ${positive})`;
      return negated ? `not ${exists}` : exists;
    }
    if (!negated) return positive;
    return op === 'is_null' ? `${field.column} is not null` : `(${positive}) is not true`;
  }

  compile(expr: Expr, negated: boolean): string {
    switch (expr.kind) {
      case 'and':
      case 'or': {
        // De Morgan: the negation is pushed down to the predicates.
        const joiner = (expr.kind === 'and') !== negated ? 'and' : 'or';
        return `(${this.compile(expr.left, negated)} ${joiner} ${this.compile(expr.right, negated)})`;
      }
      case 'not':
        return this.compile(expr.operand, !negated);
      case 'is_null':
        return this.predicate(this.resolve(expr.field), 'is_null', [], negated !== expr.negated, expr.pos);
      case 'in': {
        const field = this.resolve(expr.field);
        const values = expr.values.flatMap((v) => this.bound(v, true));
        if (values.length > MAX_IN_VALUES) this.fail(expr.pos, `more than ${MAX_IN_VALUES} values in a list`);
        return this.predicate(field, 'in', values, negated !== expr.negated, expr.pos);
      }
      case 'compare': {
        const field = this.resolve(expr.field);
        const flip = expr.op === '!=' || expr.op === '!~';
        const op = (flip ? expr.op.slice(1) : expr.op) as Exclude<CompareOp, '!=' | '!~'>;
        const [value] = this.bound(expr.value, false) as [Literal];
        if (value.type === 'null') {
          if (op !== '=') this.fail(value.pos, `null only compares with = and != (or use is null)`);
          return this.predicate(field, 'is_null', [], negated !== flip, expr.pos);
        }
        return this.predicate(field, op, [value], negated !== flip, expr.pos);
      }
    }
  }
}

/** The predicates of a tree (its comparisons, `in` lists and null tests), wherever `and`, `or` and `not` put them. */
type Predicate = Extract<Expr, { kind: 'compare' | 'in' | 'is_null' }>;
function eachPredicate(expr: Expr, visit: (p: Predicate) => void): void {
  switch (expr.kind) {
    case 'and':
    case 'or':
      eachPredicate(expr.left, visit);
      eachPredicate(expr.right, visit);
      return;
    case 'not':
      eachPredicate(expr.operand, visit);
      return;
    default:
      visit(expr);
  }
}

/** Slugs of the related entities a tree hops into; their definitions must be in the context. */
export function hoppedRelations(expr: Expr, entity: EntityDefinition): Set<string> {
  const out = new Set<string>();
  eachPredicate(expr, (p) => {
    if (p.field.path.length !== 2) return;
    const field = fieldNamed(entity.schema.fields, p.field.path[0]);
    if (field?.type === 'relation') out.add(field.entity);
  });
  return out;
}

/** The names of the `:name` parameters a tree uses. */
export function paramNames(expr: Expr): Set<string> {
  const out = new Set<string>();
  eachPredicate(expr, (p) => {
    if (p.kind === 'is_null') return;
    for (const v of p.kind === 'compare' ? [p.value] : p.values) if (v.type === 'param') out.add(v.name);
  });
  return out;
}

/**
 * The entries of `params` the expression never uses (a misspelt name, or a value meant for a
 * filter that no longer has it): refused rather than ignored, each named as `params.<name>`.
 */
export function unusedParams(expr: Expr | undefined, params: Readonly<Record<string, unknown>> | undefined): FieldProblem[] {
  const used = expr ? paramNames(expr) : new Set<string>();
  return Object.keys(params ?? {})
    .filter((name) => !used.has(name))
    .map((name) => ({
      field: `params.${name}`,
      message: `is not used by the expression (it has ${used.size ? [...used].map((u) => `:${u}`).join(', ') : 'no parameters'})`,
    }));
}

/** Compiles a parsed tree; `source` is the original text, for error positions. */
export function compileEql(source: string, expr: Expr, ctx: CompileContext): CompiledFilter {
  const compiler = new Compiler(source, ctx);
  const sql = compiler.compile(expr, false);
  return { sql, params: compiler.params };
}
