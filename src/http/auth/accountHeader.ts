import { invalid } from '../../lib/errors.js';
import { isUuid } from './principal.js';

/**
 * The one parser of `X-Account-Id` (the account an identity-center user acts on): the account id
 * in lower case, undefined when absent or empty, 400 for anything but a single UUID.
 */
export function parseAccountIdHeader(value: string | string[] | undefined): string | undefined {
  if (value === undefined || value === '') return undefined;
  if (Array.isArray(value)) throw invalid('X-Account-Id must be sent once');
  if (!isUuid(value)) throw invalid(`X-Account-Id must be an account id (UUID); got ${JSON.stringify(value.slice(0, 64))}`);
  return value.toLowerCase();
}
