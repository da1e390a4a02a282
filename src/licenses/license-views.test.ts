import { describe, expect, it } from 'vitest';
import { siteVersions } from './license.service.js';
import { deliveryView } from './license-webhooks.service.js';

describe('the versions a site reports on activation', () => {
  it('keeps only those it sent, so a missing one leaves the recorded one alone', () => {
    expect(siteVersions({ siteUrl: 'https://a.example', siteFingerprint: 'f', wpVersion: '6.5', pluginVersion: '1.2.0' })).toEqual({
      wpVersion: '6.5',
      pluginVersion: '1.2.0',
    });
    expect(siteVersions({ siteUrl: 'https://a.example', siteFingerprint: 'f', phpVersion: undefined })).toEqual({});
  });
});

describe('a licence webhook delivery as the API lists it', () => {
  it('carries its own attempts, in order, with times in ISO 8601', () => {
    const row = {
      id: 'dlv_1',
      event_id: 'evt_1',
      event: 'license.activated' as const,
      status: 'failed' as const,
      attempts: 2,
      last_status: 500,
      last_error: 'answered 500',
      created_at: new Date('2026-01-01T00:00:00Z'),
      finished_at: '2026-01-01T00:01:00.000Z',
      payload: { type: 'license.activated' },
    };
    const attempts = [
      { delivery_id: 'dlv_1', attempt: 1, started_at: new Date('2026-01-01T00:00:01Z'), duration_ms: 12, response_status: null, error: 'refused' },
      { delivery_id: 'dlv_2', attempt: 1, started_at: new Date('2026-01-01T00:00:02Z'), duration_ms: 5, response_status: 200, error: null },
      { delivery_id: 'dlv_1', attempt: 2, started_at: new Date('2026-01-01T00:00:30Z'), duration_ms: 9, response_status: 500, error: 'answered 500' },
    ];
    expect(deliveryView(row, attempts)).toEqual({
      id: 'dlv_1',
      event_id: 'evt_1',
      event: 'license.activated',
      status: 'failed',
      attempt_count: 2,
      last_status: 500,
      last_error: 'answered 500',
      created_at: '2026-01-01T00:00:00.000Z',
      finished_at: '2026-01-01T00:01:00.000Z',
      payload: { type: 'license.activated' },
      attempts: [
        { attempt: 1, started_at: '2026-01-01T00:00:01.000Z', duration_ms: 12, response_status: null, error: 'refused' },
        { attempt: 2, started_at: '2026-01-01T00:00:30.000Z', duration_ms: 9, response_status: 500, error: 'answered 500' },
      ],
    });
    expect(deliveryView({ ...row, finished_at: null }, []).finished_at).toBeNull();
  });
});
