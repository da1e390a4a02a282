import { AppError } from '../platform/errors.js';

/** Tokens of EQL, the records filter language (grammar in eql.parser.ts). */

export const KEYWORDS = ['and', 'or', 'not', 'in', 'is', 'null', 'true', 'false'] as const;
export type Keyword = (typeof KEYWORDS)[number];
export type Operator = '=' | '!=' | '<' | '<=' | '>' | '>=' | '~' | '!~';

export type Token =
  | { kind: 'identifier'; name: string; pos: number }
  | { kind: 'keyword'; keyword: Keyword; pos: number }
  | { kind: 'string'; value: string; pos: number }
  | { kind: 'number'; value: number; pos: number }
  | { kind: 'param'; name: string; pos: number }
  | { kind: 'operator'; op: Operator; pos: number }
  | { kind: 'punct'; char: '(' | ')' | ',' | '.'; pos: number }
  | { kind: 'end'; pos: number };

/** Longest expression accepted, in UTF-16 code units. */
export const MAX_EQL_LENGTH = 2000;

/**
 * A 400 `invalid_eql`. `position` is the 0-based offset in code points (what a user counts),
 * converted from the code-unit offset the lexer works with.
 */
export function invalidEql(source: string, offset: number, message: string): AppError {
  const position = [...source.slice(0, offset)].length;
  return new AppError('invalid_eql', `${message} at position ${position}`, { position, reason: message });
}

const keywordSet = new Set<string>(KEYWORDS);
const escapes: Record<string, string> = { n: '\n', t: '\t', r: '\r', b: '\b', f: '\f', '\\': '\\', "'": "'", '"': '"', '/': '/' };

function readString(source: string, start: number): { value: string; end: number } {
  const quote = source[start]!;
  let value = '';
  let i = start + 1;
  while (i < source.length) {
    const c = source[i]!;
    if (c === quote) return { value, end: i + 1 };
    if (c === '\\') {
      const next = source[i + 1];
      if (next === undefined) break;
      if (next === 'u') {
        const hex = source.slice(i + 2, i + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw invalidEql(source, i, 'invalid \\u escape (expected four hex digits)');
        value += String.fromCharCode(parseInt(hex, 16));
        i += 6;
        continue;
      }
      const replacement = escapes[next];
      if (replacement === undefined) throw invalidEql(source, i, `unknown escape \\${next}`);
      value += replacement;
      i += 2;
      continue;
    }
    value += c;
    i += 1;
  }
  throw invalidEql(source, start, 'unterminated string');
}

const numberPattern = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/** Splits an expression into tokens; the last one is always `end`. */
export function tokenize(source: string): Token[] {
  if (source.length > MAX_EQL_LENGTH) throw invalidEql(source, MAX_EQL_LENGTH, `expression longer than ${MAX_EQL_LENGTH} characters`);
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const c = source[i]!;
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r') {
      i += 1;
      continue;
    }
    const pos = i;
    if (c === "'" || c === '"') {
      const { value, end } = readString(source, i);
      tokens.push({ kind: 'string', value, pos });
      i = end;
    } else if (c === '-' || (c >= '0' && c <= '9')) {
      numberPattern.lastIndex = i;
      const match = numberPattern.exec(source);
      const after = match ? source[i + match[0].length] : undefined;
      if (!match || (after !== undefined && /[A-Za-z0-9_.]/.test(after))) throw invalidEql(source, pos, 'malformed number');
      const value = Number(match[0]);
      if (!Number.isFinite(value)) throw invalidEql(source, pos, 'number out of range');
      tokens.push({ kind: 'number', value, pos });
      i += match[0].length;
    } else if (/[A-Za-z_]/.test(c)) {
      let end = i + 1;
      while (end < source.length && /[A-Za-z0-9_]/.test(source[end]!)) end += 1;
      const word = source.slice(i, end);
      const lower = word.toLowerCase();
      if (keywordSet.has(lower)) tokens.push({ kind: 'keyword', keyword: lower as Keyword, pos });
      else tokens.push({ kind: 'identifier', name: word, pos });
      i = end;
    } else if (c === ':') {
      let end = i + 1;
      if (end < source.length && /[A-Za-z_]/.test(source[end]!)) while (end < source.length && /[A-Za-z0-9_]/.test(source[end]!)) end += 1;
      if (end === i + 1) throw invalidEql(source, pos, "expected a parameter name after ':' (a letter or _, then letters, digits or _)");
      tokens.push({ kind: 'param', name: source.slice(i + 1, end), pos });
      i = end;
    } else if (c === '(' || c === ')' || c === ',' || c === '.') {
      tokens.push({ kind: 'punct', char: c, pos });
      i += 1;
    } else {
      const two = source.slice(i, i + 2);
      if (two === '!=' || two === '<=' || two === '>=' || two === '!~') {
        tokens.push({ kind: 'operator', op: two, pos });
        i += 2;
      } else if (c === '=' || c === '<' || c === '>' || c === '~') {
        tokens.push({ kind: 'operator', op: c, pos });
        i += 1;
      } else {
        throw invalidEql(source, pos, `unexpected character ${JSON.stringify(String.fromCodePoint(source.codePointAt(i)!))}`);
      }
    }
  }
  tokens.push({ kind: 'end', pos: source.length });
  return tokens;
}
