import { describe, expect, it } from 'vitest';
import { maskLiterals, templateParts, wholeExpression } from './template-scan.mjs';

const sources = (text: string) => templateParts(text).map((p) => p.source);

describe('where a {{ }} expression ends', () => {
  it('at the first }} outside the expression’s own braces', () => {
    expect(sources('{{ {"a": {"b": 1}} }}')).toEqual([' {"a": {"b": 1}} ']);
    expect(sources('{{ {"a":1}}}')).toEqual([' {"a":1}']);
    expect(sources('x {{ a }} y {{ {"k": [1, {"z": 2}]}}} z')).toEqual([' a ', ' {"k": [1, {"z": 2}]}']);
    expect(sources('{{ $map(xs, function($v) { {"v": $v} }) }}')).toEqual([' $map(xs, function($v) { {"v": $v} }) ']);
  });

  it('not inside strings, backquoted names, comments or regular expressions', () => {
    expect(sources(`{{ "}}" & '}}' }}`)).toEqual([` "}}" & '}}' `]);
    expect(sources('{{ nodes.`a}}b`.x }}')).toEqual([' nodes.`a}}b`.x ']);
    expect(sources('{{ /* }} */ 1 }}')).toEqual([' /* }} */ 1 ']);
    expect(sources('{{ $match(s, /a}}b/) }}')).toEqual([' $match(s, /a}}b/) ']);
    expect(sources('{{ a / b }} / {{ c }}')).toEqual([' a / b ', ' c ']);
    expect(sources(String.raw`{{ "a\"}}" }}`)).toEqual([String.raw` "a\"}}" `]);
  });

  it('says where each part is, and lists a {{ nothing closes with end -1', () => {
    expect(templateParts('ab {{ x }} cd')).toEqual([{ start: 3, end: 10, source: ' x ' }]);
    expect(templateParts('a {{ x }} b {{ {"open": 1 }}')).toEqual([
      { start: 2, end: 9, source: ' x ' },
      { start: 12, end: -1, source: ' {"open": 1 }}' },
    ]);
    expect(templateParts('no braces')).toEqual([]);
  });

  it('tells a whole {{ }} string from a template with text', () => {
    expect(wholeExpression('  {{ {"a": {"b": 1}} }} ')).toBe(' {"a": {"b": 1}} ');
    expect(wholeExpression('{{ a }} and {{ b }}')).toBeUndefined();
    expect(wholeExpression('x {{ a }}')).toBeUndefined();
    expect(wholeExpression('{{ a ')).toBeUndefined();
  });

  it('blanks literals out without moving positions, keeping backquoted names', () => {
    const source = ' "nodes.x" & nodes.`y z` /* nodes.w */ & $match(a, /nodes/)';
    const masked = maskLiterals(source);
    expect(masked).toHaveLength(source.length);
    expect(masked).not.toContain('nodes.x');
    expect(masked).not.toContain('nodes.w');
    expect(masked).toContain('nodes.`y z`');
  });
});
