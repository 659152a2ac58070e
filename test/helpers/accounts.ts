import crypto from 'node:crypto';
import type { TestGateway } from './gateway.js';

export interface TestAccount {
  id: string;
  /** tokens of users of this account, by role */
  admin: string;
  operator: string;
  viewer: string;
}

/** A new account (created by a platform admin over HTTP) with admin, operator and viewer tokens. */
export async function createAccount(gw: TestGateway, opts: { capabilities?: string[]; name?: string } = {}): Promise<TestAccount> {
  const platform = await gw.token({ realm: 'platform', sub: 'platform-root', roles: ['platform-admin'] });
  const id = crypto.randomUUID();
  const res = await gw.http.post('/platform/v1/accounts', { id, name: opts.name ?? `account ${id.slice(0, 8)}` }, { token: platform });
  if (res.status !== 201) throw new Error(`account create failed: ${res.status} ${res.text}`);
  for (const capability of opts.capabilities ?? []) await grantCapability(gw, id, capability);
  const realm = `acc-${id}`;
  return {
    id,
    admin: await gw.token({ realm, sub: `admin-${id.slice(0, 8)}`, roles: ['admin'] }),
    operator: await gw.token({ realm, sub: `operator-${id.slice(0, 8)}`, roles: ['operator'] }),
    viewer: await gw.token({ realm, sub: `viewer-${id.slice(0, 8)}`, roles: ['viewer'] }),
  };
}

/**
 * Grants a capability. Goes through the IAM service when it exists (so its caches see it);
 * until then writes the row the capability layer reads.
 */
export async function grantCapability(gw: TestGateway, accountId: string, capability: string): Promise<void> {
  const iam = (gw.services as Record<string, any>).iam;
  if (iam?.grantCapability) {
    await iam.grantCapability(accountId, capability, 'test');
    return;
  }
  await gw.db.sql`insert into account_capabilities (account_id, capability, granted_by) values (${accountId}, ${capability}, 'test') on conflict do nothing`;
}
