import type { z } from 'zod';

/**
 * The one error hierarchy of the service. Each error carries its HTTP status and a stable code;
 * the error middleware renders it as `{status: 'fail', error, message, data?}`.
 */
export class AppError extends Error {
  constructor(
    public readonly status: number,
    public readonly code: string,
    message: string,
    public readonly data?: Record<string, unknown>,
    public readonly headers?: Record<string, string>,
  ) {
    super(message);
    this.name = 'AppError';
  }
}

export interface FieldProblem {
  field: string;
  message: string;
  /** Where the field is: the body, the query, the path or a header. */
  in?: 'body' | 'query' | 'path' | 'header';
}

export const invalidRequest = (message: string, data?: Record<string, unknown>) => new AppError(400, 'invalid_request', message, data);

export const validationFailed = (errors: FieldProblem[]) =>
  new AppError(400, 'validation_failed', errors.map((e) => `${e.field}: ${e.message}`).join('; '), { errors });

export const unauthenticated = (message = 'Authentication required') =>
  new AppError(401, 'unauthenticated', message, undefined, { 'WWW-Authenticate': 'Basic realm="svc"' });

export const forbidden = (capability?: string) =>
  new AppError(403, 'forbidden', capability ? `Missing capability ${capability}` : 'Not allowed', capability ? { capability } : undefined);

export const notFound = (what = 'Resource') => new AppError(404, 'not_found', `${what} not found`);

export const conflict = (code: string, message: string, data?: Record<string, unknown>) => new AppError(409, code, message, data);

export const rateLimited = (retryAfterSeconds: number) =>
  new AppError(
    429,
    'rate_limited',
    'Too many requests; retry later',
    { retry_after: retryAfterSeconds },
    {
      'Retry-After': String(retryAfterSeconds),
    },
  );

export const serviceUnavailable = (dependency: string) => new AppError(503, 'service_unavailable', `${dependency} is unavailable; retry later`, { dependency });

/** Turns zod issues into the envelope's list of field problems. */
export function problemsOf(error: z.ZodError, location: 'body' | 'query' | 'path' | 'header'): FieldProblem[] {
  return error.issues.map((issue) => {
    const path = issue.path.map(String).join('.');
    const field = issue.code === 'unrecognized_keys' ? [path, ...issue.keys].filter(Boolean).join('.') : path;
    const message = issue.code === 'unrecognized_keys' ? 'is not a known field' : issue.message;
    return { field: field || location, message, in: location };
  });
}
