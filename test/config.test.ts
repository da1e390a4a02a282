import { describe, expect, it } from 'vitest';
import { ConfigError, configVariables, loadConfig } from '../src/config.js';
import { runCli } from './helpers/cli.js';
import { readFileSync } from 'node:fs';

describe('configuration', () => {
  it('applies documented defaults', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({ PORT: 8080, SVC_ROLE: 'all', SVC_DATA_DIR: '.data', TEMPORAL_NAMESPACE: 'default', SVC_AGENT_CAPABILITY: 'edit_posts' });
    expect(config.SVC_BODY_LIMIT).toBe(1024 * 1024);
  });

  it.each([
    ['PORT', 'eighty'],
    ['PORT', '70000'],
    ['SVC_ROLE', 'both'],
    ['DATABASE_URL', 'not a url'],
    ['TEMPORAL_ADDRESS', 'localhost'],
    ['SVC_BODY_LIMIT', '1gb'],
    ['TRUST_PROXY', 'maybe'],
    ['SVC_ADMIN_PASSWORD', 'short'],
    ['SVC_AGENT_GATE_TTL', '0'],
    ['SVC_AGENT_GATE_TTL', '2w'],
    ['SVC_AGENT_GATE_TTL', '400d'],
    ['SVC_AGENT_GATE_TTL', '-5m'],
  ])('refuses %s=%s naming the variable', (variable, value) => {
    let error: unknown;
    try {
      loadConfig({ [variable]: value });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe(variable);
    expect((error as ConfigError).message).toContain(variable);
  });

  it('parses sizes and booleans', () => {
    expect(loadConfig({ SVC_BODY_LIMIT: '512kb', TRUST_PROXY: 'true' })).toMatchObject({ SVC_BODY_LIMIT: 512 * 1024, TRUST_PROXY: true });
  });

  it('parses the gate deadline as seconds or with a unit; 24 h by default', () => {
    expect(loadConfig({}).SVC_AGENT_GATE_TTL).toBe(86_400);
    for (const [value, seconds] of [
      ['900', 900],
      ['90s', 90],
      ['15m', 900],
      ['24H', 86_400],
      ['7d', 604_800],
    ] as const) {
      expect(loadConfig({ SVC_AGENT_GATE_TTL: value }).SVC_AGENT_GATE_TTL, value).toBe(seconds);
    }
  });

  it('stops the process with one clear line naming the variable', async () => {
    const result = await runCli(['migrate'], { PORT: 'eighty' });
    expect(result.code).toBe(2);
    const lines = result.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^Configuration error: PORT: /);
  });

  it('is documented variable by variable in docs/configuration.md', () => {
    const table = readFileSync(new URL('../docs/configuration.md', import.meta.url), 'utf8');
    for (const variable of configVariables) expect(table, variable).toContain(`\`${variable}\``);
  });
});
