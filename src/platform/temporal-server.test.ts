import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { LOW_LATENCY_DYNAMIC_CONFIG } from './temporal-server.js';

describe("the embedded Temporal server's dynamic config", () => {
  it('is the one a cluster is given (deploy/temporal-dynamicconfig.yaml)', () => {
    const deployed = parse(readFileSync(new URL('../../deploy/temporal-dynamicconfig.yaml', import.meta.url), 'utf8')) as Record<string, { value: unknown }[]>;
    const values = Object.fromEntries(Object.entries(deployed).map(([key, entries]) => [key, entries[0]!.value]));
    expect(LOW_LATENCY_DYNAMIC_CONFIG).toEqual(values);
  });
});
