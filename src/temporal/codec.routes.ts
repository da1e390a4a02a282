import type { Context, Next } from 'koa';
import { z } from 'zod';
import type { Principal } from '../auth/auth.service.js';
import { named } from '../http/openapi.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { forbidden, unauthenticated } from '../platform/errors.js';
import { codecPayloads, transcode } from './codec.js';
import type { TemporalHandle } from './connection.js';

// Temporal Web UI 2.50 and later append this to every codec call; it asks for nothing this codec does.
const query = z.strictObject({ preserveStorageRefs: z.enum(['true', 'false']).optional() });
named(codecPayloads, 'CodecPayloads', {
  description: "Temporal payloads as the codec server protocol carries them: each payload's metadata values and data in base64",
  examples: [{ payloads: [{ metadata: { encoding: 'YmluYXJ5L2VuY3J5cHRlZA==' }, data: 'AAECAwQ=' }] }],
});

/**
 * The capability of the codec endpoints. Decoding shows any run's payloads in clear, whoever's
 * data they are, exactly as the Temporal Web UI shows every run to whoever may open it: an
 * operator's tool, so it is the operators' capability (administrators by default), not the
 * right to manage workflows.
 */
const DECODE = 'svc_decode_payloads';

const descriptions = {
  decode:
    "Decrypts the service's payloads (any run's, so only operators: `svc_decode_payloads`, administrators by default), by application password or by the session cookie alone; other payloads are answered unchanged.",
  encode:
    'Encrypts nothing: answers the payloads as they came, so what an operator sends from the Temporal Web UI or CLI is never input the worker trusts (it refuses it with `untrusted_input`). Needs `svc_decode_payloads`.',
};

/**
 * The codec server the Temporal Web UI calls to show encrypted payloads to an operator. The UI
 * sends the browser's session cookie but cannot send a nonce, so a session cookie alone is
 * accepted here: decoding changes nothing, and CORS lets only the UI's origin read answers.
 */
export function codecRoutes({ temporal }: { temporal: TemporalHandle }): AnyRoute[] {
  const route = (operation: 'decode' | 'encode') =>
    defineRoute({
      method: 'post',
      path: `/api/temporal-codec/${operation}`,
      operationId: `codec${operation[0]!.toUpperCase()}${operation.slice(1)}`,
      summary: `Temporal codec server: ${operation === 'decode' ? 'decodes payloads' : 'answers payloads unchanged'} (for the Temporal Web UI and CLI)`,
      description: descriptions[operation],
      tag: 'temporal',
      access: 'public',
      checksCredentials: { accepts: ['basic', 'cookie'], capability: DECODE },
      // Checked before the body is read: a caller without the capability learns nothing else.
      guard: async (ctx) => {
        const caller = (ctx.state.principal ?? ctx.state.cookieSession) as Principal | undefined;
        if (!caller) throw unauthenticated();
        if (!caller.can(DECODE)) throw forbidden(DECODE);
      },
      query,
      body: codecPayloads,
      errors: { forbidden: `Missing capability ${DECODE}` },
      responses: { 200: { description: 'The payloads', raw: codecPayloads } },
      handler: async ({ body }) => ({ raw: await transcode(temporal.codec, operation, body) }),
    });
  return [route('decode'), route('encode')];
}

/** CORS for the codec endpoints, allowing only the Temporal Web UI's origin (with credentials). */
export function codecCors(uiUrl: string) {
  const origin = new URL(uiUrl).origin;
  return async (ctx: Context, next: Next) => {
    if (!ctx.path.startsWith('/api/temporal-codec/')) return next();
    if (ctx.get('origin') === origin) {
      ctx.set('Access-Control-Allow-Origin', origin);
      ctx.set('Access-Control-Allow-Credentials', 'true');
      ctx.set('Vary', 'Origin');
    }
    if (ctx.method === 'OPTIONS') {
      ctx.set('Access-Control-Allow-Methods', 'POST');
      ctx.set('Access-Control-Allow-Headers', 'Content-Type, X-Namespace, Authorization');
      ctx.status = 204;
      return;
    }
    return next();
  };
}
