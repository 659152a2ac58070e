import type { Db } from '../db/client.js';
import type { Services } from '../gateway.js';
import type { Principal } from '../http/auth/principal.js';
import { iso } from '../lib/encoding.js';
import { invalid, refused } from '../lib/errors.js';
import type { IamCache } from './cache.js';
import * as repo from './repo.js';
import { CAPABILITIES, type Capability } from './schemas.js';

function checkKnown(capability: string): asserts capability is Capability {
  if (!(CAPABILITIES as readonly string[]).includes(capability)) {
    throw invalid(`unknown capability ${JSON.stringify(capability)}; one of ${CAPABILITIES.join(', ')}`);
  }
}

/** Account capabilities (platform admins grant them) and the capability authorization layer. */
export class Capabilities {
  constructor(
    private readonly sql: Db,
    private readonly cache: IamCache,
    private readonly accounts: Pick<Services['accounts'], 'require'>,
  ) {}

  of(accountId: string): Promise<ReadonlySet<string>> {
    return this.cache.get('cap', accountId, async () => new Set((await repo.capabilities(this.sql, accountId)).map((r) => r.capability)));
  }

  async list(accountId: string) {
    await this.accounts.require(accountId);
    const rows = await repo.capabilities(this.sql, accountId);
    return {
      account_id: accountId,
      capabilities: rows.map((r) => r.capability as Capability),
      grants: rows.map((r) => ({ capability: r.capability as Capability, granted_at: iso(r.granted_at), granted_by: r.granted_by })),
    };
  }

  /** Effective on the next request on every node (acknowledged invalidation). */
  async grant(accountId: string, capability: string, by: string): Promise<void> {
    checkKnown(capability);
    await this.accounts.require(accountId);
    await repo.grantCapability(this.sql, accountId, capability, by);
    await this.cache.invalidate([`cap:${accountId}`], { wait: true });
  }

  /** false when the account did not hold it. */
  async revoke(accountId: string, capability: string): Promise<boolean> {
    checkKnown(capability);
    await this.accounts.require(accountId);
    const removed = await repo.revokeCapability(this.sql, accountId, capability);
    await this.cache.invalidate([`cap:${accountId}`], { wait: true });
    return removed;
  }

  /** The capability layer: only actions that need a capability pay for the lookup (synchronous otherwise). */
  check(principal: Principal, action: string, capability: string | undefined): void | Promise<void> {
    if (!capability || !principal.accountId) return;
    return this.require(principal.accountId, action, capability);
  }

  private async require(accountId: string, action: string, capability: string): Promise<void> {
    if ((await this.of(accountId)).has(capability)) return;
    const hint = capability === 'enroll_things'
      ? '; join existing devices with POST /api/v1/things/join and an access_code instead'
      : '; a platform admin grants capabilities';
    throw refused(`account not qualified: ${action} requires capability ${capability}, which account ${accountId} does not hold${hint}`, {
      type: 'account-not-qualified', extra: { action, capability },
    });
  }
}
