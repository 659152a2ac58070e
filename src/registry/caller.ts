import type { FastifyRequest } from 'fastify';
import { accountOf, principalOf } from '../http/auth/plugin.js';
import { refused } from '../lib/errors.js';

/** Who acts: a user (or factory service) of an account, or platform staff (no account). */
export interface Caller {
  sub: string;
  accountId?: string;
  platform: boolean;
}

export function callerOf(request: FastifyRequest): Caller {
  const p = principalOf(request);
  if (p.realmKind === 'platform') return { sub: p.sub, platform: true };
  return { sub: p.sub, accountId: accountOf(request), platform: false };
}

/** The caller's account; platform staff act on no account here (403). */
export function accountOfCaller(c: Caller): string {
  if (!c.accountId) throw refused('this operation acts on your account; a platform identity has none');
  return c.accountId;
}

export function platformOnly(c: Caller, what: string): void {
  if (!c.platform) throw refused(`only platform staff (platform-admin, platform-operator) ${what}`);
}
