import type { z } from 'zod';
import { answersWith, ERROR_CODES, type CodeWithStatus, type HttpErrorCode } from '../../workflows/error-codes.js';

export type { CodeWithStatus, ErrorCode, HttpErrorCode } from '../../workflows/error-codes.js';

/** The HTTP status of an error answer with `code`, as the catalogue declares it. */
export const statusOf = (code: HttpErrorCode): number => ERROR_CODES[code].status;

/**
 * The one error hierarchy of the service. Each error carries a code of the catalogue
 * (workflows/error-codes.ts), which gives its HTTP status; the error middleware renders it as
 * `{status: 'fail', error, message, data?}`.
 */
export class AppError extends Error {
  /** The HTTP status of the answer: the catalogue's status of `code`. */
  public readonly status: number;

  /**
   * `status` only for one of the code's `otherStatuses` in the catalogue (any other is a bug, and
   * throws); the code's own status otherwise.
   */
  constructor(
    public readonly code: HttpErrorCode,
    message: string,
    public readonly data?: Record<string, unknown>,
    public readonly headers?: Record<string, string>,
    status?: number,
  ) {
    super(message);
    this.name = 'AppError';
    if (status !== undefined && !answersWith(code, status)) throw new Error(`The catalogue of error codes gives ${code} no status ${status}`);
    this.status = status ?? statusOf(code);
  }
}

export interface FieldProblem {
  field: string;
  message: string;
  /** Where the field is: the body, the query, the path or a header. */
  in?: 'body' | 'query' | 'path' | 'header';
}

export const invalidRequest = (message: string, data?: Record<string, unknown>) => new AppError('invalid_request', message, data);

export const validationFailed = (errors: FieldProblem[]) =>
  new AppError('validation_failed', errors.map((e) => `${e.field}: ${e.message}`).join('; '), { errors });

export const unauthenticated = (message = 'Authentication required') =>
  new AppError('unauthenticated', message, undefined, { 'WWW-Authenticate': 'Basic realm="svc"' });

export const forbidden = (capability?: string) =>
  new AppError('forbidden', capability ? `Missing capability ${capability}` : 'Not allowed', capability ? { capability } : undefined);

export const notFound = (what = 'Resource') => new AppError('not_found', `${what} not found`);

/** A 409 answer: the request collides with the current state. */
export const conflict = (code: CodeWithStatus<409>, message: string, data?: Record<string, unknown>) => new AppError(code, message, data);

export const rateLimited = (retryAfterSeconds: number) =>
  new AppError(
    'rate_limited',
    'Too many requests; retry later',
    { retry_after: retryAfterSeconds },
    {
      'Retry-After': String(retryAfterSeconds),
    },
  );

export const serviceUnavailable = (dependency: string) => new AppError('service_unavailable', `${dependency} is unavailable; retry later`, { dependency });

/** Turns zod issues into the envelope's list of field problems. */
export function problemsOf(error: z.ZodError, location: 'body' | 'query' | 'path' | 'header'): FieldProblem[] {
  return error.issues.map((issue) => {
    const path = issue.path.map(String).join('.');
    const field = issue.code === 'unrecognized_keys' ? [path, ...issue.keys].filter(Boolean).join('.') : path;
    const message = issue.code === 'unrecognized_keys' ? 'is not a known field' : issue.message;
    return { field: field || location, message, in: location };
  });
}
