import { ERROR_CODES, type ErrorCode, type ErrorCodeSpec } from '../../workflows/error-codes.js';

/** Where docs/api.md holds the generated tables. */
export const TABLE_START = '<!-- error-codes:start (generated from workflows/error-codes.ts by `npm run docs:errors`; do not edit) -->';
export const TABLE_END = '<!-- error-codes:end -->';

const entries = () => (Object.entries(ERROR_CODES) as [ErrorCode, ErrorCodeSpec][]).map(([code, spec]) => ({ code, spec }));

const cell = (text: string) => text.replace(/\|/g, '\\|');

function retried(spec: ErrorCodeSpec): string {
  if (spec.retried === undefined) return '';
  if (spec.retried === 'per_failure') return 'per failure';
  return spec.retried ? 'yes' : 'no';
}

function statuses(spec: ErrorCodeSpec): string {
  const others = Object.entries(spec.otherStatuses ?? {}).map(([status, where]) => `${status} (${where})`);
  return [String(spec.status), ...others].join(', ');
}

/**
 * The two tables of docs/api.md, from the catalogue: the codes of error answers by status, and the
 * codes that are never an answer of their own (a node's or a run's error, an agent tool result, a
 * webhook delivery). "Retried" says, for a code a node of a run can fail with, whether Temporal
 * tries the node again.
 */
export function errorTables(): string {
  const answers = entries()
    .filter((e) => e.spec.status !== null)
    .sort((a, b) => a.spec.status! - b.spec.status!);
  const others = entries().filter((e) => e.spec.status === null);
  return [
    '| status | code | meaning | a node failing with it is retried |',
    '|---|---|---|---|',
    ...answers.map(({ code, spec }) => `| ${cell(statuses(spec))} | \`${code}\` | ${cell(spec.meaning)} | ${retried(spec)} |`),
    '',
    "Codes that are never an answer of their own: a node's or a run's `error.code`, an agent tool result, a webhook delivery, or between the service's own parts.",
    '',
    '| code | meaning | a node failing with it is retried |',
    '|---|---|---|',
    ...others.map(({ code, spec }) => `| \`${code}\` | ${cell(spec.meaning)} | ${retried(spec)} |`),
  ].join('\n');
}

/** `doc` with the text between the markers replaced by the tables; throws when a marker is missing. */
export function withErrorTables(doc: string): string {
  const start = doc.indexOf(TABLE_START);
  const end = doc.indexOf(TABLE_END);
  if (start < 0 || end < start) throw new Error('docs/api.md has no error-codes markers');
  return `${doc.slice(0, start + TABLE_START.length)}\n\n${errorTables()}\n\n${doc.slice(end)}`;
}
