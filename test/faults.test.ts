import { describe, expect, it } from 'vitest';
import { describeReport, runFaultScenario } from '../bench/faults.js';

/**
 * The fault scenario of bench/faults.ts (`npm run faults` runs it longer): steady runs through
 * the API while the worker is SIGKILLed, the Temporal dev server and PostgreSQL are restarted.
 */
describe('faults under load', () => {
  it('loses no run, starts none twice for a retried request, runs no completed node twice and answers 503 while a dependency is down', async () => {
    const report = await runFaultScenario({ calmSeconds: 5, outageSeconds: 6, rate: 3, log: () => undefined });
    const summary = describeReport(report);
    expect(report.problems, summary).toEqual([]);
    // The checks the problems list is made of, stated once more where a reader looks for them.
    expect(report.accepted).toBeGreaterThan(30);
    expect(report.lostRuns).toEqual([]);
    // Clients retried their 503s with the same Idempotency-Key: each got one run, none got two.
    expect(report.duplicateRows).toBe(0);
    expect(report.gaveUp).toEqual([]);
    expect(report.unexplainedRows).toEqual([]);
    expect(report.notFinished).toEqual([]);
    expect(report.repeatedNodes).toEqual([]);
    expect(report.hangs).toEqual([]);
    // 503 while a dependency is down, and in the moments after it is back until the API has
    // reconnected (report.recoveryMs, bounded in the problems); never while all were up.
    const refusedIn = new Set(report.unavailable.map((u) => u.phase));
    expect(refusedIn).toContain('temporal down');
    expect(refusedIn).toContain('postgresql down');
    // A 503 counts in the phase its answer came in: a request sent in the last moment of a calm
    // phase may be answered once the next outage has begun.
    const refusals = JSON.stringify(report.unavailable);
    for (const phase of ['calm', 'worker down', 'after worker restart']) expect(refusedIn.has(phase), `${phase}: ${refusals}`).toBe(false);
    expect(report.unavailable.every((u) => /^service_unavailable \((temporal|postgresql)\)$/.test(u.dependency ?? ''))).toBe(true);
  }, 420_000);
});
