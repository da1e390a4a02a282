import { describe, expect, it } from 'vitest';
import { numberPlaceholders } from './sql.js';

describe('numberPlaceholders', () => {
  it('numbers ? placeholders outside quoted literals, and answers the same on every call', () => {
    const text = `select * from t where a = ? and b = '?' and c = any(?)`;
    expect(numberPlaceholders(text)).toBe(`select * from t where a = $1 and b = '?' and c = any($2)`);
    expect(numberPlaceholders(text)).toBe(`select * from t where a = $1 and b = '?' and c = any($2)`);
  });

  it('leaves a text written with $n placeholders as it is', () => {
    expect(numberPlaceholders('update t set a = $1 where id = $2')).toBe('update t set a = $1 where id = $2');
  });

  it('numbers a long text (a bulk insert of many rows) as a short one', () => {
    const rows = Array.from({ length: 3000 }, () => '(?, ?)').join(', ');
    const numbered = numberPlaceholders(`insert into t (a, b) values ${rows}`);
    expect(numbered.endsWith('($5999, $6000)')).toBe(true);
    expect(numbered.startsWith('insert into t (a, b) values ($1, $2), ($3, $4)')).toBe(true);
  });

  it('keeps numbering correctly past the number of texts it keeps', () => {
    for (let i = 0; i < 1200; i++) expect(numberPlaceholders(`select ? as v${i}, ? as w`)).toBe(`select $1 as v${i}, $2 as w`);
  });
});
