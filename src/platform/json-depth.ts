/**
 * How deep JSON from outside may nest. Serialising a value walks it recursively, so a body nested
 * 20,000 levels deep parses fine but overflows the stack wherever it is written out again (the
 * database, Temporal's payloads, a response). A hundred levels is far beyond any real document.
 */
export const MAX_JSON_DEPTH = 100;

/** Whether `value` nests objects and arrays more than `limit` levels deep; walks without recursion. */
export function nestsDeeperThan(value: unknown, limit = MAX_JSON_DEPTH): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length) {
    const [item, depth] = stack.pop()!;
    if (item === null || typeof item !== 'object') continue;
    if (depth >= limit) return true;
    for (const child of Array.isArray(item) ? item : Object.values(item)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
  return false;
}

/** JSON.parse that refuses a document nested deeper than `limit` (throws a SyntaxError saying so). */
export function parseBoundedJson(text: string, limit = MAX_JSON_DEPTH): unknown {
  const value: unknown = JSON.parse(text);
  if (nestsDeeperThan(value, limit)) throw new SyntaxError(`JSON nests deeper than ${limit} levels`);
  return value;
}
