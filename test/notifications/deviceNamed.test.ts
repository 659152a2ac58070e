import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';

/** A revocation's notification names the device (its serial and model, through trust's thingSearch), not its certificate serial. */
let gw: TestGateway;
let account: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw);
});
afterAll(async () => gw?.close());

describe('device notifications', () => {
  it('a revoked device is named by its serial and model; the certificate serial is in the body', async () => {
    const device = await enrollDevice(gw, account, { serial: 'SN-NAMED-7', model: 'FFF1:8001' });
    await revokeDevice(gw, account, device.thingId);
    const item = await waitFor(async () => {
      const res = await gw.http.get('/api/notifications/feed', { token: account.viewer, headers: { 'x-account-id': account.id } });
      return res.body.items.find((i: any) => i.template === 'device/revoked');
    }, 10_000, 'the revocation notification');
    expect(item.title).toBe('Device SN-NAMED-7 was revoked');
    expect(item.body).toContain('Device SN-NAMED-7 (model FFF1:8001');
    expect(item.body.toLowerCase()).toContain(`its certificate ${device.serial}`);
    expect(item.data).toMatchObject({ thingId: device.thingId, deviceSerial: 'SN-NAMED-7', model: 'FFF1:8001' });
  });
});
