// Where the `{{ }}` expressions of a template string are. Plain JavaScript, and pure: the graph
// workflow (workflows/references.ts), the definition checks (src/nodes/expressions.ts) and the
// expression sandbox's threads (src/nodes/expression.worker.mjs, which load no TypeScript) all
// read templates with this one scanner, so they agree on where each expression ends.
//
// An expression ends at the first `}}` outside its own braces, brackets and parentheses, string
// literals ("…", '…'), backquoted names, comments (/* … */) and regular expressions (/…/ where an
// operand may start): a JSONata object may end with `}}` (`{{ {"a": {"b": 1}} }}`), and a string
// may hold one (`{{ "}}" }}`).

/** Characters after which a `/` starts a regular expression rather than dividing. */
const OPERAND_EXPECTED = new Set(['', '(', '[', '{', ',', ':', ';', '=', '!', '<', '>', '+', '-', '*', '/', '%', '&', '|', '~', '?', '^']);

/** Index just past the string literal, name or comment that starts at `i`; `i` itself when none does. */
function skipLiteral(text, i, previous) {
  const c = text[i];
  if (c === '"' || c === "'" || c === '`') {
    let j = i + 1;
    while (j < text.length && text[j] !== c) j += text[j] === '\\' && c !== '`' ? 2 : 1;
    return Math.min(j + 1, text.length);
  }
  if (c === '/' && text[i + 1] === '*') {
    const end = text.indexOf('*/', i + 2);
    return end < 0 ? text.length : end + 2;
  }
  if (c === '/' && OPERAND_EXPECTED.has(previous)) {
    let j = i + 1;
    let inClass = false;
    while (j < text.length && (inClass || text[j] !== '/')) {
      if (text[j] === '\\') j++;
      else if (text[j] === '[') inClass = true;
      else if (text[j] === ']') inClass = false;
      j++;
    }
    return Math.min(j + 1, text.length);
  }
  return i;
}

/** Index of the `}}` that ends the expression starting at `from`, or -1 when nothing ends it. */
function closingBraces(text, from) {
  let depth = 0;
  let previous = '';
  for (let i = from; i < text.length;) {
    const skipped = skipLiteral(text, i, previous);
    if (skipped > i) {
      previous = 'x';
      i = skipped;
      continue;
    }
    const c = text[i];
    if (depth === 0 && c === '}' && text[i + 1] === '}') return i;
    if (c === '{' || c === '[' || c === '(') depth++;
    else if ((c === '}' || c === ']' || c === ')') && depth > 0) depth--;
    if (!/\s/.test(c)) previous = /[\w$.)\]}]/.test(c) ? 'x' : c;
    i++;
  }
  return -1;
}

/**
 * The `{{ }}` expressions of a string, in order: `start` of the `{{`, `end` just past the `}}`,
 * and `source`, the text between (from index `start + 2`). A `{{` that nothing closes is listed
 * with `end: -1` and ends the scan: what follows it is text.
 */
export function templateParts(text) {
  const parts = [];
  let at = text.indexOf('{{');
  while (at >= 0) {
    const close = closingBraces(text, at + 2);
    if (close < 0) {
      parts.push({ start: at, end: -1, source: text.slice(at + 2) });
      break;
    }
    parts.push({ start: at, end: close + 2, source: text.slice(at + 2, close) });
    at = text.indexOf('{{', close + 2);
  }
  return parts;
}

/**
 * The expression with its string literals, comments and regular expressions blanked out (same
 * length, so positions hold), backquoted names kept: what is left is names, numbers and operators.
 */
export function maskLiterals(source) {
  let out = '';
  let previous = '';
  for (let i = 0; i < source.length;) {
    const skipped = source[i] === '`' ? i : skipLiteral(source, i, previous);
    if (skipped > i) {
      out += ' '.repeat(skipped - i);
      previous = 'x';
      i = skipped;
      continue;
    }
    const c = source[i];
    if (!/\s/.test(c)) previous = /[\w$.)\]}]/.test(c) ? 'x' : c;
    out += c;
    i++;
  }
  return out;
}

/** The expression of a string that is one whole `{{ }}` (blanks around it allowed), else undefined. */
export function wholeExpression(text) {
  const parts = templateParts(text);
  if (parts.length !== 1 || parts[0].end < 0) return undefined;
  const [part] = parts;
  return text.slice(0, part.start).trim() === '' && text.slice(part.end).trim() === '' ? part.source : undefined;
}
