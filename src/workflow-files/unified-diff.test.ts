import { describe, expect, it } from 'vitest';
import { unifiedDiff } from './unified-diff.js';

const lines = (n: number, from = 1) => Array.from({ length: n }, (_, i) => `line ${i + from}`);
const text = (xs: string[]) => xs.join('\n') + '\n';

/** Applies a unified diff to `before` (a strict reader: context and removals must match). */
function patch(before: string, diff: string): string {
  if (!diff) return before;
  const a = before === '' ? [] : before.replace(/\n$/, '').split('\n');
  const out: string[] = [];
  let at = 0;
  const rows = diff.replace(/\n$/, '').split('\n').slice(2);
  for (const row of rows) {
    const header = /^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@$/.exec(row);
    if (header) {
      const start = Number(header[1]) - (header[2] === '0' ? 0 : 1);
      while (at < start) out.push(a[at++]!);
      continue;
    }
    if (row.startsWith('\\')) continue;
    const [op, line] = [row[0], row.slice(1)];
    if (op === ' ' || op === '-') expect(a[at++]).toBe(line);
    if (op === ' ' || op === '+') out.push(line);
  }
  while (at < a.length) out.push(a[at++]!);
  return out.length ? out.join('\n') + '\n' : '';
}

describe('unifiedDiff', () => {
  it('is empty for equal texts', () => {
    expect(unifiedDiff('a\nb\n', 'a\nb\n', 'a/x', 'b/x')).toBe('');
  });

  it('shows one changed line with three lines of context', () => {
    const before = text(lines(10));
    const after = before.replace('line 5\n', 'line five\n');
    expect(unifiedDiff(before, after, 'a/w.yaml', 'b/w.yaml')).toBe(
      ['--- a/w.yaml', '+++ b/w.yaml', '@@ -2,7 +2,7 @@', 'line 2', 'line 3', 'line 4', '-line 5', '+line five', 'line 6', 'line 7', 'line 8']
        .map((l) => (/^(---|\+\+\+|@@|[-+])/.test(l) ? l : ` ${l}`))
        .join('\n') + '\n',
    );
  });

  it('keeps changes far apart in separate hunks and close ones in one', () => {
    const before = lines(40);
    const far = [...before];
    far[2] = 'changed 3';
    far[30] = 'changed 31';
    const diffFar = unifiedDiff(text(before), text(far), 'a', 'b');
    expect(diffFar.match(/^@@/gm)).toHaveLength(2);
    expect(diffFar).toContain('@@ -1,6 +1,6 @@');
    expect(diffFar).toContain('@@ -28,7 +28,7 @@');
    const near = [...before];
    near[10] = 'changed 11';
    near[16] = 'changed 17';
    expect(unifiedDiff(text(before), text(near), 'a', 'b').match(/^@@/gm)).toHaveLength(1);
  });

  it('adds a whole file against /dev/null and removes one', () => {
    expect(unifiedDiff('', 'a\nb\n', '/dev/null', 'b/new.yaml')).toBe('--- /dev/null\n+++ b/new.yaml\n@@ -0,0 +1,2 @@\n+a\n+b\n');
    expect(unifiedDiff('a\n', '', 'a/old.yaml', '/dev/null')).toBe('--- a/old.yaml\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n');
  });

  it('inserts at the start and appends at the end', () => {
    const before = text(lines(5));
    expect(unifiedDiff(before, 'line 0\n' + before, 'a', 'b')).toContain('@@ -1,3 +1,4 @@\n+line 0\n line 1\n');
    expect(unifiedDiff(before, before + 'line 6\n', 'a', 'b')).toContain('@@ -3,3 +3,4 @@\n line 3\n line 4\n line 5\n+line 6\n');
  });

  it('marks a last line without a newline', () => {
    expect(unifiedDiff('a\nb\n', 'a\nb', 'x', 'y')).toBe('--- x\n+++ y\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n');
  });

  it('is the shortest script: a moved block reads as one removal and one insertion', () => {
    const before = text(['a', 'b', 'c', 'd', 'e', 'f']);
    const after = text(['a', 'c', 'd', 'e', 'b', 'f']);
    const diff = unifiedDiff(before, after, 'x', 'y');
    expect(diff.split('\n').filter((l) => /^[-+][^-+]/.test(l))).toEqual(['-b', '+b']);
  });

  it('produces a patch that turns one text into the other, for many random edits', () => {
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let round = 0; round < 200; round++) {
      const before = lines(Math.floor(random() * 30));
      const after = before.flatMap((l) => {
        const r = random();
        if (r < 0.15) return [];
        if (r < 0.3) return [l, `new ${Math.floor(random() * 1000)}`];
        if (r < 0.4) return [`${l} edited`];
        return [l];
      });
      if (random() < 0.3) after.unshift('first');
      const a = before.length ? text(before) : '';
      const b = after.length ? text(after) : '';
      expect(patch(a, unifiedDiff(a, b, 'a', 'b'))).toBe(b);
    }
  });
});
