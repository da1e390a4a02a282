import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../workflows/error-codes.js';
import { AppError, conflict, statusOf } from './errors.js';
import { errorTables, withErrorTables } from './error-table.js';

describe('docs/api.md', () => {
  it('holds the error tables generated from the catalogue (npm run docs:errors rewrites them)', () => {
    const doc = readFileSync(new URL('../../docs/api.md', import.meta.url), 'utf8');
    expect(withErrorTables(doc)).toBe(doc);
  });

  it('lists every code of the catalogue once', () => {
    const tables = errorTables();
    for (const code of Object.keys(ERROR_CODES)) expect(tables.split(`| \`${code}\` |`).length - 1, code).toBe(1);
  });

  it('refuses a document without the markers', () => {
    expect(() => withErrorTables('# API\n')).toThrow(/markers/);
  });
});

describe('AppError', () => {
  it('takes its status from the catalogue', () => {
    expect(new AppError('not_found', 'x').status).toBe(404);
    expect(new AppError('idempotency_key_reused', 'x').status).toBe(422);
    expect(conflict('workflow_archived', 'x').status).toBe(409);
    expect(statusOf('service_unavailable')).toBe(503);
  });

  it('takes another status only where the catalogue declares it', () => {
    expect(new AppError('egress_denied', 'x', undefined, undefined, 502).status).toBe(502);
    expect(() => new AppError('not_found', 'x', undefined, undefined, 410)).toThrow(/no status 410/);
  });
});
