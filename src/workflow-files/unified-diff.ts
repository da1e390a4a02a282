/**
 * A unified diff of two texts, line by line, as `diff -u` and git print it: `---`/`+++` headers,
 * `@@ -a,b +c,d @@` hunks with three lines of context. The edit script is Myers' shortest one
 * (the same algorithm as git's default), so a change reads as the lines that changed, never as a
 * whole file removed and added again. Dependency-free on purpose: a few dozen lines beat a
 * package whose output format could drift under a pinned expectation.
 */

type Edit = { op: ' ' | '-' | '+'; line: string };

/** Beyond this many differing lines the script stops searching and shows every line as changed. */
const MAX_EDIT_DISTANCE = 4000;

/** The lines of `text`; a last line without a newline is marked, as `diff` marks it. */
function linesOf(text: string): { lines: string[]; noFinalNewline: boolean } {
  if (text === '') return { lines: [], noFinalNewline: false };
  const lines = text.split('\n');
  const noFinalNewline = lines[lines.length - 1] !== '';
  if (!noFinalNewline) lines.pop();
  return { lines, noFinalNewline };
}

/** Myers' O(ND) shortest edit script between `a` and `b`. */
function editScript(a: string[], b: string[]): Edit[] {
  const n = a.length;
  const m = b.length;
  const max = Math.min(n + m, MAX_EDIT_DISTANCE);
  const offset = max + 1;
  let v = new Int32Array(2 * max + 3);
  const trace: Int32Array[] = [];
  let found = -1;
  for (let d = 0; d <= max && found < 0; d++) {
    trace.push(v.slice());
    const next = v.slice();
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && v[offset + k - 1]! < v[offset + k + 1]!) ? v[offset + k + 1]! : v[offset + k - 1]! + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      next[offset + k] = x;
      if (x >= n && y >= m) {
        found = d;
        break;
      }
    }
    v = next;
  }
  if (found < 0) return [...a.map((line) => ({ op: '-' as const, line })), ...b.map((line) => ({ op: '+' as const, line }))];
  // Walk the trace back from the end to recover the path.
  const edits: Edit[] = [];
  let x = n;
  let y = m;
  for (let d = found; d > 0; d--) {
    const prev = trace[d]!;
    const k = x - y;
    const down = k === -d || (k !== d && prev[offset + k - 1]! < prev[offset + k + 1]!);
    const prevK = down ? k + 1 : k - 1;
    const prevX = prev[offset + prevK]!;
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      edits.push({ op: ' ', line: a[--x]! });
      y--;
    }
    if (down) edits.push({ op: '+', line: b[--y]! });
    else edits.push({ op: '-', line: a[--x]! });
  }
  while (x > 0 && y > 0) {
    edits.push({ op: ' ', line: a[--x]! });
    y--;
  }
  return edits.reverse();
}

const range = (start: number, count: number) => (count === 1 ? `${start}` : `${count === 0 ? start - 1 : start},${count}`);

/**
 * The unified diff turning `before` into `after`, or '' when they are equal. `from`/`to` name the
 * two sides in the headers (`/dev/null` for a side that does not exist).
 */
export function unifiedDiff(before: string, after: string, from: string, to: string, context = 3): string {
  if (before === after) return '';
  const a = linesOf(before);
  const b = linesOf(after);
  // A last line that lost or gained its newline differs from its twin.
  if (a.noFinalNewline && a.lines.length) a.lines[a.lines.length - 1] += '\0';
  if (b.noFinalNewline && b.lines.length) b.lines[b.lines.length - 1] += '\0';
  const edits = editScript(a.lines, b.lines);
  const out = [`--- ${from}`, `+++ ${to}`];
  let i = 0;
  while (i < edits.length) {
    while (i < edits.length && edits[i]!.op === ' ') i++;
    if (i >= edits.length) break;
    // A hunk: from `context` lines before this change to `context` lines after the last change
    // that is no more than 2 * context unchanged lines away from the one before it.
    const start = Math.max(0, i - context);
    let end = i;
    for (let j = i; j < edits.length; j++) {
      if (edits[j]!.op !== ' ') end = j;
      else if (j - end > 2 * context) break;
    }
    const stop = Math.min(edits.length, end + context + 1);
    let aStart = 1;
    let bStart = 1;
    for (let j = 0; j < start; j++) {
      if (edits[j]!.op !== '+') aStart++;
      if (edits[j]!.op !== '-') bStart++;
    }
    const hunk = edits.slice(start, stop);
    const aCount = hunk.filter((e) => e.op !== '+').length;
    const bCount = hunk.filter((e) => e.op !== '-').length;
    out.push(`@@ -${range(aStart, aCount)} +${range(bStart, bCount)} @@`);
    for (const e of hunk) {
      const marked = e.line.endsWith('\0');
      out.push(`${e.op}${marked ? e.line.slice(0, -1) : e.line}`);
      if (marked) out.push('\\ No newline at end of file');
    }
    i = stop;
  }
  return out.join('\n') + '\n';
}
