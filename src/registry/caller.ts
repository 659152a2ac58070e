import { refused } from '../lib/errors.js';

/** Who acts: a user (or factory service) of an account, or platform staff (no account). */
export interface Caller {
  sub: string;
  accountId?: string;
  platform: boolean;
}

/** The caller's account; platform staff act on no account here (403). */
export function accountOfCaller(c: Caller): string {
  if (!c.accountId) throw refused('this operation acts on your account; a platform identity has none');
  return c.accountId;
}

export function platformOnly(c: Caller, what: string): void {
  if (!c.platform) throw refused(`only platform staff (platform-admin, platform-operator) ${what}`);
}
