import type { Db } from '../db/client.js';
import { ACCOUNT_ROLES, FACTORY_SERVICE_ROLE, PLATFORM_ROLES } from '../http/auth/principal.js';
import { iso } from '../lib/encoding.js';
import { invalid, refused } from '../lib/errors.js';
import type { Logger } from '../log.js';
import type { IamCache } from './cache.js';
import * as repo from './repo.js';

const rolesKey = (accountId: string, principalId: string) => `${accountId}|${principalId}`;

/** Account roles by rank: every route that admits an operator admits an admin, and so on down. */
const ACCOUNT_RANK = new Map<string, number>([['viewer', 1], ['operator', 2], ['admin', 3]]);
/** Every role name the gateway gives a meaning to; any other name in a request is a mistake (400). */
const KNOWN_ROLES = new Set<string>([...ACCOUNT_ROLES, ...PLATFORM_ROLES, FACTORY_SERVICE_ROLE, 'notification-publisher', 'notification-reader']);

/** What `GET|PUT /iam/v1/accounts/{accountId}/users/{principalId}/roles` answer. */
export interface UserRolesView {
  account_id: string;
  principal_id: string;
  /** assigned by an account admin ([] when none) */
  roles: string[];
  /** last asserted by the identity provider ([] when the user never signed in) */
  idp_roles: string[];
  /** what the user's static keys carry now: `roles` when any, else `idp_roles` */
  key_roles: string[];
  updated_at: string | null;
  assigned_by: string | null;
}

/**
 * The roles a tenant IAM user's (acc-* realm) static credentials carry. Two sources:
 * - assigned: an account admin's explicit decision for the user's keys (`iam_assigned_roles`);
 * - asserted: what the identity provider last asserted for the user, recorded on each of their JWT
 *   requests (a write only on change).
 * A key carries the assigned roles when any are assigned, else the asserted ones (docs/decisions.md,
 * "Roles of service users"). A bearer token always carries its own claims only.
 */
export class PrincipalRoles {
  constructor(private readonly sql: Db, private readonly cache: IamCache, private readonly log?: Logger) {}

  /** The roles a static key of the user carries, from the node cache only (the SVC hot path). */
  peek(accountId: string, principalId: string): string[] | undefined {
    const key = rolesKey(accountId, principalId);
    const assigned = this.cache.peek<string[] | null>('assigned', key);
    if (assigned === undefined) return undefined;
    return assigned ?? this.cache.peek<string[] | undefined>('roles', key);
  }

  /** The roles a static key of the user carries (undefined: none assigned and never signed in). */
  async get(accountId: string, principalId: string): Promise<string[] | undefined> {
    const key = rolesKey(accountId, principalId);
    const assigned = await this.cache.get('assigned', key, async () => (await repo.assignedRoles(this.sql, accountId, principalId))?.roles ?? null);
    return assigned ?? this.cache.get('roles', key, () => repo.principalRoles(this.sql, accountId, principalId));
  }

  /** Remembers the roles the identity provider asserted in a JWT of the user. */
  async record(accountId: string, principalId: string, roles: string[]): Promise<void> {
    const key = rolesKey(accountId, principalId);
    const sorted = [...new Set(roles)].sort();
    const known = this.cache.peek<string[] | undefined>('roles', key);
    if (known && known.length === sorted.length && known.every((r, i) => r === sorted[i])) return;
    const changed = await repo.recordPrincipalRoles(this.sql, accountId, principalId, sorted);
    if (changed) await this.cache.invalidate([`roles:${key}`], { wait: false });
    this.cache.set('roles', key, sorted);
  }

  /** Both sources and their combination, read from the database (the admin's view). */
  async describe(account: string, principalId: string): Promise<UserRolesView> {
    const accountId = account.toLowerCase();
    const [assigned, asserted] = await Promise.all([repo.assignedRoles(this.sql, accountId, principalId), repo.principalRoles(this.sql, accountId, principalId)]);
    const roles = assigned?.roles ?? [];
    const idpRoles = asserted ?? [];
    return {
      account_id: accountId, principal_id: principalId, roles, idp_roles: idpRoles, key_roles: roles.length ? roles : idpRoles,
      updated_at: assigned ? iso(assigned.updated_at) : null, assigned_by: assigned?.assigned_by ?? null,
    };
  }

  /**
   * Replaces the roles assigned to the user (`[]` removes the assignment: keys fall back to the
   * asserted roles). The caller assigns only account roles it holds; every node serves the user's
   * keys with the new roles before this returns.
   */
  async assign(account: string, principalId: string, roles: string[], by: { sub: string; roles: string[] }): Promise<UserRolesView> {
    // lower case: the cache key must be the one the SVC path builds from the credential's row
    const accountId = account.toLowerCase();
    const wanted = assignable(roles, by.roles);
    if (wanted.length) await repo.putAssignedRoles(this.sql, { accountId, principalId, roles: wanted, by: by.sub });
    else await repo.deleteAssignedRoles(this.sql, accountId, principalId);
    await this.cache.invalidate([`assigned:${rolesKey(accountId, principalId)}`], { wait: true });
    this.log?.info({ accountId, principalId, roles: wanted, by: by.sub }, 'iam: roles assigned to a user');
    return this.describe(accountId, principalId);
  }
}

/**
 * The roles to store, sorted and unique: 400 for a name the gateway does not know, 403 for a known
 * role that is no account role (platform, factory-service, notification roles) or that ranks above
 * every account role the caller holds.
 */
export function assignable(roles: string[], callerRoles: string[]): string[] {
  const wanted = [...new Set(roles)].sort();
  const unknown = wanted.filter((r) => !KNOWN_ROLES.has(r));
  if (unknown.length) {
    throw invalid(`unknown role ${unknown.map((r) => JSON.stringify(r)).join(', ')}: the account roles are ${ACCOUNT_ROLES.join(', ')}`, { type: 'unknown-role', extra: { roles: unknown } });
  }
  const own = Math.max(0, ...callerRoles.map((r) => ACCOUNT_RANK.get(r) ?? 0));
  for (const r of wanted) {
    const rank = ACCOUNT_RANK.get(r);
    if (rank === undefined) {
      throw refused(`role ${r} cannot be assigned: an account admin assigns only account roles (${ACCOUNT_ROLES.join(', ')}) it holds`, { type: 'role-not-assignable' });
    }
    if (rank > own) {
      throw refused(`role ${r} cannot be assigned: you do not hold it (you hold ${callerRoles.join(', ') || 'no roles'})`, { type: 'role-not-assignable' });
    }
  }
  return wanted;
}
