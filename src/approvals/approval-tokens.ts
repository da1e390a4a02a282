// The approver's link: one token per approver and action, signed (HMAC-SHA256 under a key derived
// from the service's master key), expiring with the action. The token is the approver's credential
// on the page, so it names exactly one person and one action; whether that person may still
// decide is checked against the stored action on every use. Pure, so it is unit tested on its own.

/** What signs and checks: the service's KeyRing (`sign`, `verify`). */
export interface Signer {
  sign(value: string): string;
  verify(value: string, signature: string): boolean;
}

export interface ApprovalToken {
  actionId: string;
  userId: number;
  /** Seconds since the epoch after which the token is dead (the action's deadline). */
  expiresAt: number;
}

const PURPOSE = 'approval-page/v1';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const BASE36 = /^[0-9a-z]{1,13}$/;

const payloadOf = (t: ApprovalToken) => `${t.actionId}.${t.userId.toString(36)}.${t.expiresAt.toString(36)}`;

/** `<action id>.<user id>.<expiry>.<signature>`: URL-safe, so it is a path segment as it is. */
export function signApprovalToken(signer: Signer, token: ApprovalToken): string {
  const payload = payloadOf(token);
  return `${payload}.${signer.sign(`${PURPOSE}:${payload}`)}`;
}

/** Why a token cannot be used: it is not one of ours (or was altered), or it is past its expiry. */
export type TokenProblem = 'invalid' | 'expired';

/** The token's contents when its signature holds; its expiry is checked against `nowSeconds`. */
export function readApprovalToken(signer: Signer, text: string, nowSeconds: number): ApprovalToken | TokenProblem {
  const parts = text.split('.');
  if (parts.length !== 4) return 'invalid';
  const [actionId, user, expiry, signature] = parts as [string, string, string, string];
  if (!UUID.test(actionId) || !BASE36.test(user) || !BASE36.test(expiry) || !signature) return 'invalid';
  const token = { actionId, userId: parseInt(user, 36), expiresAt: parseInt(expiry, 36) };
  if (!Number.isSafeInteger(token.userId) || !Number.isSafeInteger(token.expiresAt) || payloadOf(token) !== `${actionId}.${user}.${expiry}`) return 'invalid';
  if (!signer.verify(`${PURPOSE}:${payloadOf(token)}`, signature)) return 'invalid';
  return token.expiresAt <= nowSeconds ? 'expired' : token;
}
