import type { Db } from '../db/client.js';
import type { IamCache } from './cache.js';
import * as repo from './repo.js';

const rolesKey = (accountId: string, principalId: string) => `${accountId}|${principalId}`;

/**
 * The roles the identity provider last asserted for a tenant IAM user (acc-* realm): recorded on
 * each of their JWT requests (a write only on change), given to their static credentials.
 */
export class PrincipalRoles {
  constructor(private readonly sql: Db, private readonly cache: IamCache) {}

  /** The cached roles, without loading (the SVC hot path). */
  peek(accountId: string, principalId: string): string[] | undefined {
    return this.cache.peek<string[] | undefined>('roles', rolesKey(accountId, principalId));
  }

  get(accountId: string, principalId: string): Promise<string[] | undefined> {
    return this.cache.get('roles', rolesKey(accountId, principalId), () => repo.principalRoles(this.sql, accountId, principalId));
  }

  async record(accountId: string, principalId: string, roles: string[]): Promise<void> {
    const key = rolesKey(accountId, principalId);
    const sorted = [...new Set(roles)].sort();
    const known = this.cache.peek<string[] | undefined>('roles', key);
    if (known && known.length === sorted.length && known.every((r, i) => r === sorted[i])) return;
    const changed = await repo.recordPrincipalRoles(this.sql, accountId, principalId, sorted);
    if (changed) await this.cache.invalidate([`roles:${key}`], { wait: false });
    this.cache.set('roles', key, sorted);
  }
}
