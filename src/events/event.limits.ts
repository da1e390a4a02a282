import { z } from 'zod';
import { validationFailed } from '../platform/errors.js';

// The bounds of an event, shared by POST /events, the emit_event node and the wait_for_event node.

/** A name: letters, digits and `_ . : / -`, starting with a letter or digit, at most 100 characters (`payment.received`). */
export const eventName = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,99}$/, 'must be 1 to 100 letters, digits or _ . : / -, starting with a letter or digit');

/** A correlation key: 1 to 200 characters, no control characters (an order id, an email address). */
export const eventKey = z
  .string()
  .min(1)
  .max(200)
  // The control characters (Unicode Cc) spelled as ranges: a pattern with \p{...} is one many JSON Schema tools cannot read.
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  .regex(/^[^\u0000-\u001f\u007f-\u009f]*$/, 'must not contain control characters');

/** A key as an expression may give it: a string, or a number it is written as. */
export const resolvedEventKey = z.union([z.string(), z.number().finite()]).transform(String).pipe(eventKey);

/** Largest `data` of an event, as JSON text: it travels in the history of every run it resumes. */
export const MAX_EVENT_DATA_BYTES = 64 * 1024;

/** How far back a wait may look for an event sent before it began; events are kept this long. */
export const MAX_LOOKBACK_MS = 24 * 3600 * 1000;
/** A wait's lookback unless its node says otherwise. */
export const DEFAULT_LOOKBACK_MS = 10 * 60 * 1000;

/** Refuses data too large to send (400 naming `field`). */
export function checkEventData(data: unknown, field = 'data'): void {
  const bytes = Buffer.byteLength(JSON.stringify(data ?? null));
  if (bytes > MAX_EVENT_DATA_BYTES) throw validationFailed([{ field, message: `is ${bytes} bytes of JSON; an event carries at most ${MAX_EVENT_DATA_BYTES}` }]);
}
