import { describe, expect, it } from 'vitest';
import { describeReport, runFaultScenario } from '../bench/faults.js';

/**
 * The fault scenario of bench/faults.ts (`npm run faults` runs it longer): steady runs through
 * the API while the worker is SIGKILLed, the Temporal dev server and PostgreSQL are restarted.
 */
describe('faults under load', () => {
  it('loses no run, runs no completed node twice and answers 503 while a dependency is down', async () => {
    const report = await runFaultScenario({ calmSeconds: 5, outageSeconds: 6, rate: 3, log: () => undefined });
    const summary = describeReport(report);
    expect(report.problems, summary).toEqual([]);
    // The checks the problems list is made of, stated once more where a reader looks for them.
    expect(report.accepted).toBeGreaterThan(30);
    expect(report.lostRuns).toEqual([]);
    expect(report.notFinished).toEqual([]);
    expect(report.repeatedNodes).toEqual([]);
    expect(report.hangs).toEqual([]);
    expect(new Set(report.unavailable.map((u) => u.phase))).toEqual(new Set(['temporal down', 'postgresql down']));
    expect(report.unavailable.every((u) => /^service_unavailable \((temporal|postgresql)\)$/.test(u.dependency ?? ''))).toBe(true);
  }, 420_000);
});
