import { describe, expect, it } from 'vitest';
import { Metrics, mayReadMetrics } from './metrics.js';

describe('who may read the metrics', () => {
  const token = 'a-scraper-token-of-16+';
  it('lets loopback clients in without credentials', () => {
    for (const remoteAddress of ['127.0.0.1', '127.0.0.2', '::1', '::ffff:127.0.0.1']) {
      expect(mayReadMetrics({ remoteAddress, authorization: undefined }, undefined), remoteAddress).toBe(true);
    }
  });

  it('refuses anyone else, unless they present the token', () => {
    for (const remoteAddress of ['10.0.0.5', '192.168.1.2', '::ffff:172.17.0.1', undefined]) {
      expect(mayReadMetrics({ remoteAddress, authorization: undefined }, undefined)).toBe(false);
      expect(mayReadMetrics({ remoteAddress, authorization: `Bearer ${token}` }, undefined)).toBe(false);
      expect(mayReadMetrics({ remoteAddress, authorization: `Bearer ${token}` }, token)).toBe(true);
      expect(mayReadMetrics({ remoteAddress, authorization: 'Bearer wrong-token-of-16-chars' }, token)).toBe(false);
      expect(mayReadMetrics({ remoteAddress, authorization: `Basic ${token}` }, token)).toBe(false);
    }
  });

  it('refuses a token of the right length in other characters, rather than failing on it', () => {
    const presented = `Bearer ${'é'.repeat(token.length)}`;
    expect(mayReadMetrics({ remoteAddress: '10.0.0.5', authorization: presented }, token)).toBe(false);
  });
});

describe('the registry', () => {
  it('renders the service’s series and what the SDK’s endpoint answers, and survives that endpoint failing', async () => {
    const metrics = new Metrics();
    metrics.runsFinished.inc({ status: 'success' });
    const text = await metrics.text(async () => 'temporal_worker_task_slots_available{worker_type="WorkflowWorker"} 100');
    expect(text).toContain('svc_runs_finished_total{status="success"} 1');
    expect(text).toContain('temporal_worker_task_slots_available');
    expect(await metrics.text(async () => Promise.reject(new Error('down')))).toContain('svc_runs_finished_total');
  });
});
