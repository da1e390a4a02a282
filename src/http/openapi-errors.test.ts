import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { errorCodes } from './openapi.js';
import { defineRoute, type AnyRoute } from './route.js';

const route = (spec: Partial<AnyRoute>): AnyRoute =>
  defineRoute({
    method: 'post',
    path: '/x/{id}',
    operationId: 'x',
    summary: 'x',
    description: 'x',
    tag: 'workflows',
    access: 'authenticated',
    responses: { 200: { description: 'ok' } },
    handler: async () => ({}),
    ...spec,
  }) as AnyRoute;

const listed = (codes: ReturnType<typeof errorCodes>) => Object.fromEntries([...codes].map(([status, byCode]) => [status, [...byCode.keys()]]));

describe('the error codes of an operation', () => {
  it('are those every route answers, by its access, parameters and body', () => {
    expect(listed(errorCodes(route({}), undefined, true))).toEqual({
      400: ['invalid_request', 'validation_failed'],
      401: ['unauthenticated'],
      429: ['rate_limited'],
      500: ['internal_error'],
      503: ['service_unavailable'],
    });
    const full = listed(errorCodes(route({ params: z.object({ id: z.string() }), body: z.object({}) }), 'svc_x', true));
    expect(full[403]).toEqual(['forbidden']);
    expect(full[404]).toEqual(['not_found']);
    expect(full[413]).toEqual(['payload_too_large']);
    expect(full[415]).toEqual(['unsupported_media_type']);
  });

  it('add the codes the route declares, under their status, with its note', () => {
    const codes = errorCodes(route({ errors: { workflow_archived: 'archived', conflict: 'slug taken', idempotency_key_reused: 'reused' } }), undefined, true);
    expect([...codes.get(409)!]).toEqual([
      ['workflow_archived', 'archived'],
      ['conflict', 'slug taken'],
    ]);
    expect([...codes.get(422)!.keys()]).toEqual(['idempotency_key_reused']);
    expect([...codes.keys()]).toEqual([...codes.keys()].sort((a, b) => a - b));
  });

  it('take a declared note over the generic one, and another status only where the catalogue has it', () => {
    expect(
      errorCodes(route({ errors: { rate_limited: 'five a minute' } }), undefined, true)
        .get(429)!
        .get('rate_limited'),
    ).toBe('five a minute');
    const other = errorCodes(route({ errors: { egress_denied: { status: 502, when: 'provider refused' } } }), undefined, true);
    expect(other.get(502)!.get('egress_denied')).toBe('provider refused');
    expect(other.get(422)).toBeUndefined();
    expect(() => errorCodes(route({ errors: { conflict: { status: 500, when: 'no' } } }), undefined, true)).toThrow(/no status 500/);
  });
});
