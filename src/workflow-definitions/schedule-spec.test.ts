import { describe, expect, it } from 'vitest';
import { cronProblem, knownTimeZone, scheduleProblems } from './schedule-spec.js';

// Verdicts of the Temporal server (1.29) these mirror; test/schedule-validation.test.ts compares
// them with the running server itself.
describe('cron strings as Temporal reads them', () => {
  it('takes 5 fields, 6 with a year last, 7 with a second first', () => {
    for (const cron of [
      '*/5 * * * *',
      '0 9 * * mon-fri',
      '0 0 1 1 * 2050',
      '0 0 1 1 * 2000-2100/10',
      '30 0 9 * * 1-5 *',
      '59 59 23 31 12 7 2100',
      '+1 01 * * *',
    ])
      expect(cronProblem(cron), cron).toBeUndefined();
    expect(cronProblem('* * * *')).toMatch(/expected 5 to 7 fields/);
    expect(cronProblem('* * * * * * * *')).toMatch(/expected 5 to 7 fields/);
  });

  it('names the field out of range, and each of them', () => {
    expect(cronProblem('x x x x x')).toBe(
      'Minute is not in range [0-59], Hour is not in range [0-23], DayOfMonth is not in range [1-31], Month is not in range [1-12], DayOfWeek is not in range [0-7]',
    );
    expect(cronProblem('60 * * * *')).toBe('Minute is not in range [0-59]');
    expect(cronProblem('0 30 9 * * 1-5')).toMatch(/Hour is not in range \[0-23\].*Year is not in range \[2000-2100\]/);
    expect(cronProblem('0 0 1 1 * 1999')).toBe('Year is not in range [2000-2100]');
    expect(cronProblem('0 0 * * 8')).toBe('DayOfWeek is not in range [0-7]');
  });

  it('reads steps, ranges and lists as Temporal does', () => {
    for (const cron of ['*/60 * * * *', '1/2 * * * *', '1-5,*/2 * * * *', '0 0 * * 0-7', '0 0 * * 6-7']) expect(cronProblem(cron), cron).toBeUndefined();
    expect(cronProblem('*/0 * * * *')).toMatch(/Minute has an invalid step/);
    expect(cronProblem('*/-2 * * * *')).toMatch(/invalid step/);
    expect(cronProblem('1/2/3 * * * *')).toMatch(/Minute is malformed/);
    expect(cronProblem('1-2-3 * * * *')).toMatch(/Minute is malformed/);
    expect(cronProblem('5-1 * * * *')).toMatch(/Minute ends before it starts/);
    for (const cron of ['1,,2 * * * *', '0, * * * *', '- * * * *', '-1 * * * *', '0x1 * * * *', '? * * * *', 'L * * * *'])
      expect(cronProblem(cron), cron).toMatch(/Minute/);
  });

  it('reads month names from three letters and day names from two', () => {
    for (const cron of ['0 0 * jan *', '0 0 * JAN-dec *', '0 0 * janu *', '0 0 * * Su', '0 0 * * th', '0 0 * * sun-sat'])
      expect(cronProblem(cron), cron).toBeUndefined();
    expect(cronProblem('0 0 * ja *')).toBe('Month is not in range [1-12]');
    expect(cronProblem('0 0 * * s')).toBe('DayOfWeek is not in range [0-7]');
    expect(cronProblem('0 0 * * fri-mon')).toMatch(/DayOfWeek ends before it starts/);
  });

  it('takes the shorthands as written, and @every with a duration of at least a second and a shorter phase', () => {
    for (const cron of ['@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly', ' @hourly '])
      expect(cronProblem(cron), cron).toBeUndefined();
    for (const cron of ['@HOURLY', '@reboot', '@fortnightly']) expect(cronProblem(cron), cron).toMatch(/expected 5 to 7 fields/);
    for (const cron of [
      '@every 1s',
      '@every 90s',
      '@every 1.5h',
      '@every 1h30m',
      '@every 1d',
      '@every .5h',
      '@every 1h/30m',
      '@every 1s/0s',
      '@every 5s/',
      '@every 1000000000ns',
    ])
      expect(cronProblem(cron), cron).toBeUndefined();
    expect(cronProblem('@every 0s')).toMatch(/too small/);
    expect(cronProblem('@every 999ms')).toMatch(/too small/);
    expect(cronProblem('@every -1s')).toMatch(/too small/);
    expect(cronProblem('@every 1s/1s')).toMatch(/phase must be shorter/);
    expect(cronProblem('@every 2s/-1s')).toMatch(/phase cannot be negative/);
    for (const cron of ['@every', '@every5s', '@every\t1s', '@every  5s', '@every 5', '@every 1w', '@every 2562048h', '@every 5s/1s/1s'])
      expect(cronProblem(cron), cron).toBeDefined();
  });

  it('reads a TZ= or CRON_TZ= prefix and checks its zone', () => {
    for (const cron of ['TZ=Europe/Paris 0 0 * * *', 'CRON_TZ=UTC @daily', 'TZ=UTC @every 1h', 'TZ= 0 0 * * *'])
      expect(cronProblem(cron), cron).toBeUndefined();
    expect(cronProblem('TZ=Not/AZone 0 0 * * *')).toBe('unknown time zone Not/AZone');
    expect(cronProblem('TZ=UTC')).toMatch(/expected a schedule after/);
  });
});

describe('time zones as Temporal knows them', () => {
  it('takes IANA names and their links as written, and UTC', () => {
    for (const zone of ['UTC', 'Europe/Paris', 'US/Eastern', 'EST', 'Etc/GMT+5', 'Europe/Kyiv', 'Asia/Calcutta', 'GMT', 'Zulu', ''])
      expect(knownTimeZone(zone), zone).toBe(true);
  });

  it('refuses unknown names, offsets, other cases than the name has, and the zones that name no place', () => {
    for (const zone of [
      'Not/AZone',
      '+01:00',
      'Z',
      'utc',
      'europe/paris',
      'EUROPE/PARIS',
      'us/eastern',
      'Local',
      'Factory',
      'posixrules',
      '../etc/passwd',
      'Europe/Paris ',
    ])
      expect(knownTimeZone(zone), zone).toBe(false);
  });
});

describe('a schedule trigger', () => {
  it('names the field of each problem', () => {
    expect(scheduleProblems({ cron: '0 9 * * *', timezone: 'Europe/Paris' })).toEqual([]);
    expect(scheduleProblems({ cron: '99 9 * * *', timezone: 'Not/AZone' }).map((p) => p.field)).toEqual(['trigger.config.cron', 'trigger.config.timezone']);
    expect(scheduleProblems({ cron: 'TZ=UTC 0 9 * * *', timezone: 'Europe/Paris' })).toEqual([
      { field: 'trigger.config.timezone', message: 'the cron string names the time zone UTC; timezone names Europe/Paris' },
    ]);
    expect(scheduleProblems({ cron: 'TZ=UTC 0 9 * * *', timezone: 'UTC' })).toEqual([]);
  });
});
