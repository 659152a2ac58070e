import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { deviceCertificateKind } from '../../src/trust/kinds.js';

let gw: TestGateway;
let account: TestAccount;
let claimSecret: string;

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw);
  claimSecret = (await createClaimGroup(gw, account)).sharedSecret;
});
afterAll(async () => gw?.close());

const revokedOf = async (serial: string) =>
  (await gw.db.sql<{ revoked: boolean }[]>`select revoked from device_certificates where serial = ${serial}`)[0]?.revoked;

/** An enrolled device with a second certificate awaiting its first use (as a renewal stores it: its row, its actor born issued). */
async function renewed(): Promise<{ device: EnrolledDevice; pending: string }> {
  const device = await enrollDevice(gw, account, { claimSecret });
  const pending = crypto.randomBytes(16).toString('hex');
  const notAfter = new Date(Date.now() + 30 * 86_400_000);
  await gw.gw.actors.run(async (uow) => {
    await uow.sql`insert into device_certificates (serial, thing_id, pem, not_after) values (${pending}, ${device.thingId}, 'renewed', ${notAfter})`;
    await uow.create(deviceCertificateKind, pending, { serial: pending, thingId: device.thingId, issuedAt: new Date().toISOString(), notAfter: notAfter.toISOString(), renewal: true });
  });
  return { device, pending };
}

describe('certificate first use on the connect path', () => {
  const hourAgo = () => new Date(Date.now() - 3_600_000);
  // what the broker reports on each accepted CONNECT, and the filter's periodic reload
  const used = (thingId: string, serial: string, notBefore: Date) => gw.testHooks.trust.certificateUsed(thingId, serial, notBefore);

  it('a young certificate is always looked up: its first use revokes the older one, even before the node reloaded', async () => {
    const { device, pending } = await renewed();
    await used(device.thingId, pending.toUpperCase(), new Date());
    expect(await revokedOf(device.serial)).toBe(true);
    expect(await revokedOf(pending)).toBe(false);
  });

  it('young certificates presented at once are asked together: each awaiting one is found, the others left alone', async () => {
    const a = await renewed();
    const b = await renewed();
    const plain = await Promise.all(Array.from({ length: 5 }, () => enrollDevice(gw, account, { claimSecret })));
    await Promise.all([
      used(a.device.thingId, `00${a.pending}`, new Date()),
      ...plain.map((d) => used(d.thingId, d.serial, new Date())),
      used(b.device.thingId, b.pending.toUpperCase(), new Date()),
    ]);
    expect(await revokedOf(a.device.serial)).toBe(true);
    expect(await revokedOf(b.device.serial)).toBe(true);
    for (const d of plain) expect(await revokedOf(d.serial)).toBe(false);
  });

  it('an older certificate is looked up when the node knows it awaits first use; other connects cost no round trip', async () => {
    const { device, pending } = await renewed();
    // the common connect: the current certificate, nothing of it awaits first use
    await used(device.thingId, device.serial, hourAgo());
    expect(await revokedOf(device.serial)).toBe(false);
    // only a renewal after the last reload is unknown to the node, and a renewal issues a young
    // certificate (previous test); an old one presented now is not looked up
    await used(device.thingId, pending, hourAgo());
    expect(await revokedOf(device.serial)).toBe(false);
    await gw.testHooks.trust.reloadFirstUse();
    await used(device.thingId, pending, hourAgo());
    expect(await revokedOf(device.serial)).toBe(true);
  });
});
