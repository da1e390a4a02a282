/**
 * The signature the service puts on activate and verify answers, and the endorsement a retiring
 * signing key puts on its successor. The canonical forms and the verification are the TypeScript
 * licence client's (clients/typescript/src/signature.ts), so the texts the service signs and the
 * texts a client checks are built by the same code; signing, with the service's private key, is
 * here.
 */
import { sign as edSign, type KeyObject } from 'node:crypto';

export * from '../../clients/typescript/src/signature.js';

/** ISO 8601 UTC to the second, the form every signed timestamp takes. */
export const isoSeconds = (date: Date) => `${date.toISOString().slice(0, 19)}Z`;

/** The base64 Ed25519 signature of `text` (UTF-8) by the service's key. */
export const signText = (text: string, privateKey: KeyObject) => edSign(null, Buffer.from(text, 'utf8'), privateKey).toString('base64');
