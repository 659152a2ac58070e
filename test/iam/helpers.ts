import type { TestAccount } from '../helpers/accounts.js';
import type { TestGateway } from '../helpers/gateway.js';

export const svc = (accessKeyId: string, secret: string) => `SVC ${Buffer.from(`${accessKeyId}:${secret}`).toString('base64')}`;
export const svcHeaders = (c: { access_key_id: string; secret_key: string; session_token?: string }): Record<string, string> => ({
  authorization: svc(c.access_key_id, c.secret_key),
  ...(c.session_token ? { 'x-session-token': c.session_token } : {}),
});

export async function platformToken(gw: TestGateway): Promise<string> {
  return gw.token({ realm: 'platform', sub: 'platform-root', roles: ['platform-admin'] });
}

/** A tenant IAM user who signed in once with `roles` (so the gateway knows them) and a static credential. */
export async function userWithCredential(gw: TestGateway, account: TestAccount, sub: string, roles: string[]) {
  const token = await gw.token({ realm: `acc-${account.id}`, sub, roles });
  const who = await gw.http.get('/iam/v1/whoami', { token });
  if (roles.length && who.status !== 200) throw new Error(`whoami failed: ${who.status} ${who.text}`);
  const res = await gw.http.post(`/iam/v1/accounts/${account.id}/credentials`, { principal_id: sub, description: 'test' }, { token: account.admin });
  if (res.status !== 201) throw new Error(`credential create failed: ${res.status} ${res.text}`);
  return { token, credential: res.body as { id: string; access_key_id: string; secret_key: string } };
}

/** Assigns an idc user to an account (platform admin) and answers a JWT of that user. */
export async function idcUser(gw: TestGateway, accountId: string, sub: string, roles: string[], realm = 'idc-corp') {
  const platform = await platformToken(gw);
  const res = await gw.http.put(`/platform/v1/accounts/${accountId}/assignments/${realm}/${sub}`, { roles }, { token: platform });
  if (res.status !== 201 && res.status !== 200) throw new Error(`assignment failed: ${res.status} ${res.text}`);
  return gw.token({ realm, sub, roles: [] });
}
