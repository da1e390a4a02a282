import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const dir = new URL('../workflows/', import.meta.url).pathname;

describe('workflows/ holds deterministic code only', () => {
  it('imports nothing but @temporalio/workflow, sibling workflow files and activity types', () => {
    const offenders: string[] = [];
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))) {
      const text = readFileSync(join(dir, file), 'utf8');
      for (const match of text.matchAll(/^import\s+(type\s+)?[^'"]*from\s+['"]([^'"]+)['"]/gm)) {
        const [, typeOnly, spec] = match;
        const allowed = spec === '@temporalio/workflow' || spec!.startsWith('./') || (typeOnly && spec!.startsWith('../activities/'));
        if (!allowed) offenders.push(`${file}: ${spec}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});
