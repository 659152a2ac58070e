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
  for (const capability of opts.capabilities ?? []) await grantCapability(gw, id, capability, platform);
  const realm = `acc-${id}`;
  return {
    id,
    admin: await gw.token({ realm, sub: `admin-${id.slice(0, 8)}`, roles: ['admin'] }),
    operator: await gw.token({ realm, sub: `operator-${id.slice(0, 8)}`, roles: ['operator'] }),
    viewer: await gw.token({ realm, sub: `viewer-${id.slice(0, 8)}`, roles: ['viewer'] }),
  };
}

/** Grants a capability as a platform admin does (PUT /platform/v1/accounts/{id}/capabilities/{capability}). */
export async function grantCapability(gw: TestGateway, accountId: string, capability: string, token?: string): Promise<void> {
  const platform = token ?? (await gw.token({ realm: 'platform', sub: 'platform-root', roles: ['platform-admin'] }));
  const res = await gw.http.put(`/platform/v1/accounts/${accountId}/capabilities/${capability}`, undefined, { token: platform });
  if (res.status !== 200) throw new Error(`capability grant failed: ${res.status} ${res.text}`);
}

/** Revokes a capability as a platform admin does (DELETE /platform/v1/accounts/{id}/capabilities/{capability}). */
export async function revokeCapability(gw: TestGateway, accountId: string, capability: string): Promise<void> {
  const platform = await gw.token({ realm: 'platform', sub: 'platform-root', roles: ['platform-admin'] });
  const res = await gw.http.delete(`/platform/v1/accounts/${accountId}/capabilities/${capability}`, { token: platform });
  if (res.status !== 204) throw new Error(`capability revoke failed: ${res.status} ${res.text}`);
}
