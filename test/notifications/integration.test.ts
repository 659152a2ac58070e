import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, revokeDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { SseClient, streamCookie, userToken } from './helpers.js';

describe('notifications from the gateway\'s own events (trust domain, end to end)', () => {
  let gw: TestGateway;
  let account: TestAccount;
  beforeAll(async () => {
    gw = await startTestGateway();
    account = await createAccount(gw);
  });
  afterAll(async () => {
    await gw?.close();
  });

  it('a claim group reaching its cap and a device revocation land in the account\'s feed and stream', async () => {
    const reader = await userToken(gw, account.id, 'ops-1');
    const s = await SseClient.open(`${gw.httpUrl}/console/notifications/stream`, { cookie: (await streamCookie(gw, reader, account.id)).cookie });
    try {
      const group = await createClaimGroup(gw, account, { name: 'line <7>', maxDevices: 1 });
      const device = await enrollDevice(gw, account, { claimSecret: group.sharedSecret });
      await revokeDevice(gw, account, device.thingId);
      const items = await waitFor(async () => {
        const r = await gw.http.get('/console/notifications/feed', { token: reader, headers: { 'x-account-id': account.id } });
        return r.body.items.length >= 2 ? r.body.items : undefined;
      }, 15_000, 'two notifications');
      const byTemplate = Object.fromEntries(items.map((i: any) => [i.template, i]));
      expect(byTemplate['claim-group/capped']).toMatchObject({ scope: 'tenant', accountId: account.id, title: 'Claim group line <7> reached its limit of 1 devices' });
      expect(byTemplate['device/revoked']).toMatchObject({ scope: 'tenant', accountId: account.id, severity: 'warning', actionUrl: `/things/${device.thingId}` });
      expect(byTemplate['device/revoked'].title).toContain('was revoked');
      await s.until(() => s.notifications().length >= 2, 'two stream frames');
      expect(s.notifications().map((f) => f.notification.template).sort()).toEqual(['claim-group/capped', 'device/revoked']);
    } finally {
      s.close();
    }
  });
});
