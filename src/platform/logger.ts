import { pino, type Logger } from 'pino';
import { traceFields } from './tracing.js';

export type { Logger };

/** Paths whose values never reach a log line, whatever object they sit in. */
const redactPaths = [
  'password',
  '*.password',
  'cred',
  '*.cred',
  'token',
  '*.token',
  'secret',
  '*.secret',
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-svc-nonce"]',
  'res.headers["set-cookie"]',
  'headers.authorization',
  'headers.cookie',
  // Parser errors carry the raw request body, which can hold passwords.
  'err.body',
  'err.rawBody',
];

/** Structured JSON logs; secrets are censored by path before serialisation. */
export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'workflow-svc' },
      redact: { paths: redactPaths, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
      // A line written while a span is active names its trace (when tracing is on).
      mixin: traceFields,
    },
    destination,
  );
}

/** A URL with its password masked, for logs and start-up summaries. */
export const mask = (url: string) => url.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
