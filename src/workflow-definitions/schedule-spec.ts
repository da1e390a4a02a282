import type { FieldProblem } from '../platform/errors.js';

/**
 * The schedule a `schedule` trigger asks Temporal for, checked as Temporal's server checks it
 * (its cron-string parser and interval and time zone rules) before anything is saved, so a
 * schedule Temporal would refuse is a 400 naming the field rather than a workflow saved without
 * its schedule. `test/schedule-validation.test.ts` holds this check to the real server's answers.
 *
 * A cron string is an optional `TZ=<zone> ` or `CRON_TZ=<zone> ` prefix, then `@every
 * <duration>[/<phase>]`, a shorthand (`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`,
 * `@midnight`, `@hourly`), or 5 to 7 fields: `minute hour day-of-month month day-of-week`, then
 * an optional `year`; with 7 fields a leading `second`. A field is `*` or comma-separated
 * values and `a-b` ranges, each with an optional `/step`; months and days of the week may be
 * named (`jan`, `mon`; at least three and two letters).
 */

const SHORTHANDS = new Set(['@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly']);
const MONTHS = ['january', 'february', 'march', 'april', 'may', 'june', 'july', 'august', 'september', 'october', 'november', 'december'];
const DAYS = ['sunday', 'monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday'];

interface FieldSpec {
  name: string;
  min: number;
  max: number;
  names?: { list: string[]; shortest: number; first: number };
}
const SECOND: FieldSpec = { name: 'Second', min: 0, max: 59 };
const MINUTE: FieldSpec = { name: 'Minute', min: 0, max: 59 };
const HOUR: FieldSpec = { name: 'Hour', min: 0, max: 23 };
const DAY_OF_MONTH: FieldSpec = { name: 'DayOfMonth', min: 1, max: 31 };
const MONTH: FieldSpec = { name: 'Month', min: 1, max: 12, names: { list: MONTHS, shortest: 3, first: 1 } };
const DAY_OF_WEEK: FieldSpec = { name: 'DayOfWeek', min: 0, max: 7, names: { list: DAYS, shortest: 2, first: 0 } };
const YEAR: FieldSpec = { name: 'Year', min: 2000, max: 2100 };

/** A decimal integer as Go's strconv.Atoi reads it (an optional sign, digits, nothing else). */
function integer(text: string): number | undefined {
  return /^[+-]?\d+$/.test(text) ? Number(text) : undefined;
}

/** One value of a field: a number, or for months and days of the week a name's prefix. */
function value(text: string, field: FieldSpec, min: number): number | undefined {
  const names = field.names;
  if (names && text.length >= names.shortest) {
    const i = names.list.findIndex((n) => n.startsWith(text.toLowerCase()));
    if (i >= 0) return i + names.first >= min && i + names.first <= field.max ? i + names.first : undefined;
  }
  const n = integer(text);
  return n !== undefined && n >= min && n <= field.max ? n : undefined;
}

/** What is wrong with one field, or undefined. */
function fieldProblem(text: string, field: FieldSpec): string | undefined {
  const range = `${field.name} is not in range [${field.min}-${field.max}]`;
  for (let part of text.split(',')) {
    if (part.includes('/')) {
      const pieces = part.split('/');
      if (pieces.length !== 2) return `${field.name} is malformed: ${text}`;
      const step = integer(pieces[1]!);
      if (step === undefined || step < 1) return `${field.name} has an invalid step: ${text}`;
      part = pieces[0]!;
    }
    if (part === '*') continue;
    if (part.includes('-')) {
      const ends = part.split('-');
      if (ends.length !== 2) return `${field.name} is malformed: ${text}`;
      const start = value(ends[0]!, field, field.min);
      if (start === undefined) return range;
      if (value(ends[1]!, field, start) === undefined) return `${field.name} ends before it starts or is not in range [${field.min}-${field.max}]`;
    } else if (value(part, field, field.min) === undefined) return range;
  }
  return undefined;
}

const DURATION_UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, μs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
/** Go's longest duration, in milliseconds (an int64 of nanoseconds). */
const MAX_DURATION_MS = 9_223_372_036_854;

/** A duration as Go's time.ParseDuration (with `d` for days, as Temporal adds) reads it, in milliseconds. */
function duration(text: string): number | undefined {
  const match = /^([-+]?)((?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h|d))+|0)$/.exec(text);
  if (!match) return undefined;
  let total = 0;
  for (const [, amount, unit] of match[2]!.matchAll(/(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d)/g)) total += Number(amount) * DURATION_UNITS[unit!]!;
  if (total > MAX_DURATION_MS) return undefined;
  return match[1] === '-' ? -total : total;
}

function intervalProblem(text: string): string | undefined {
  // As the server reads it: one space after @every, then the interval, an optional /phase.
  if (!text.startsWith('@every ')) return 'expected @every <duration>, e.g. @every 90s';
  const [every, phase, extra] = text.slice('@every '.length).split('/');
  if (extra !== undefined || every === undefined) return 'expected @every <duration>[/<phase>]';
  const interval = duration(every);
  if (interval === undefined) return `${JSON.stringify(every)} is not a duration (e.g. 90s, 15m, 1h30m, 1d)`;
  if (interval < 1000) return 'the interval is too small: at least 1s';
  if (!phase) return undefined;
  const offset = duration(phase);
  if (offset === undefined) return `${JSON.stringify(phase)} is not a duration (e.g. 30m)`;
  if (offset < 0) return 'the phase cannot be negative';
  if (offset >= interval) return 'the phase must be shorter than the interval';
  return undefined;
}

/**
 * Whether the Temporal server knows the time zone: IANA names (and their links such as
 * `US/Eastern`), case as written, and `UTC`. Stricter than the server in one way: `Local` (the
 * zone of whichever machine runs the Temporal server) and tzdata's internal `Factory` and
 * `posixrules` are refused, since none says when a run happens.
 */
export function knownTimeZone(zone: string): boolean {
  if (zone === 'UTC' || zone === '') return true;
  let resolved: string;
  try {
    resolved = new Intl.DateTimeFormat('en-US', { timeZone: zone }).resolvedOptions().timeZone;
  } catch {
    return false;
  }
  // Intl ignores case, the server does not: `utc` or `europe/paris` would be refused there.
  const canonical = [...Intl.supportedValuesOf('timeZone'), 'UTC'];
  const sameButCase = canonical.find((c) => c.toLowerCase() === zone.toLowerCase());
  if (sameButCase !== undefined) return sameButCase === zone;
  return resolved.length > 0 && /^[A-Z]/.test(zone);
}

/** What is wrong with a cron string as Temporal reads it, or undefined. */
export function cronProblem(cron: string): string | undefined {
  let text = cron.trim();
  const prefix = /^(TZ|CRON_TZ)=(\S*)(\s+|$)/.exec(text);
  if (prefix) {
    if (!prefix[3]) return `expected a schedule after ${prefix[0]}`;
    if (!knownTimeZone(prefix[2]!)) return `unknown time zone ${prefix[2]}`;
    text = text.slice(prefix[0].length).trim();
  }
  if (text.startsWith('@every')) return intervalProblem(text);
  if (SHORTHANDS.has(text)) return undefined;
  const fields = text.split(/\s+/).filter(Boolean);
  const layout =
    fields.length === 5
      ? [MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK]
      : fields.length === 6
        ? [MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK, YEAR]
        : fields.length === 7
          ? [SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK, YEAR]
          : undefined;
  if (!layout)
    return 'expected 5 to 7 fields (minute hour day-of-month month day-of-week [year]; with 7, a leading second), @every <duration> or a shorthand such as @daily';
  const problems = fields.map((f, i) => fieldProblem(f, layout[i]!)).filter((p): p is string => p !== undefined);
  return problems.length ? problems.join(', ') : undefined;
}

/** The problems of a schedule trigger's configuration, each naming its field. */
export function scheduleProblems(config: { cron: string; timezone?: string | undefined }): FieldProblem[] {
  const problems: FieldProblem[] = [];
  const cron = cronProblem(config.cron);
  if (cron) problems.push({ field: 'trigger.config.cron', message: cron });
  if (config.timezone !== undefined && !knownTimeZone(config.timezone)) {
    problems.push({ field: 'trigger.config.timezone', message: `unknown time zone ${config.timezone} (an IANA name such as Europe/Paris)` });
  }
  const named = /^\s*(?:TZ|CRON_TZ)=(\S+)/.exec(config.cron)?.[1];
  if (named && config.timezone && named !== config.timezone) {
    problems.push({ field: 'trigger.config.timezone', message: `the cron string names the time zone ${named}; timezone names ${config.timezone}` });
  }
  return problems;
}
