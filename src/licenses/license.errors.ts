import { AppError, conflict } from '../platform/errors.js';

/**
 * The licence portal's refusals: an unknown key, an expired or unusable licence, a full licence,
 * and deactivating a site that has no activation or was already deactivated (their statuses are
 * the catalogue's, workflows/error-codes.ts).
 */
export const licenseNotFound = () => new AppError('license_not_found', 'No licence matches this key');

export const licenseExpired = (expiresAt: Date) => new AppError('license_expired', `The licence expired at ${expiresAt.toISOString()}`);

export const licenseInactive = (status: string) => new AppError('license_inactive', `The licence is ${status}`);

/** The limit goes in `data.site_limit`, like every other detail of a failure envelope. */
export const siteLimitReached = (limit: number) =>
  conflict('site_limit_reached', `Every domain slot of this licence is in use (limit ${limit})`, { site_limit: limit });

export const activationNotFound = () => new AppError('activation_not_found', 'This site has no activation on this licence');

export const alreadyDeactivated = () => conflict('already_deactivated', 'This site was already deactivated');
