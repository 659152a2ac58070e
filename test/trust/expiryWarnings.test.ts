import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/lib/clock.js';
import { CERTIFICATE_EXPIRY_JOB } from '../../src/trust/expiryWarnings.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice } from '../helpers/devices.js';
import { mtls, newKey } from '../helpers/rotation.js';
import { waitFor } from '../helpers/wait.js';
import { userToken } from '../notifications/helpers.js';

const DAY = 86_400_000;
let gw: TestGateway;
let account: TestAccount;
let other: TestAccount;
const clock = new ManualClock();

beforeAll(async () => {
  // certificates for 45 days: not within the 30-day window at first, within it 20 days later
  gw = await startTestGateway({ HTTPS_PORT: '0', DEVICE_CERT_DAYS: '45' }, { clock });
  account = await createAccount(gw);
  other = await createAccount(gw);
});
afterAll(async () => gw?.close());

/** Queues the sweep through pg-boss and waits until it completed. */
async function runSweep(): Promise<void> {
  const id = await gw.gw.jobs.send(CERTIFICATE_EXPIRY_JOB, {});
  await waitFor(async () => {
    const [row] = await gw.db.sql<{ state: string }[]>`select state from pgboss.job where id = ${id}`;
    if (row?.state === 'failed') throw new Error('the expiry sweep failed');
    return row?.state === 'completed';
  }, 20_000, 'expiry sweep completed');
}

async function feed(of: TestAccount) {
  const reader = await userToken(gw, of.id, 'ops-1');
  const res = await gw.http.get('/console/notifications/feed', { token: reader, headers: { 'x-account-id': of.id } });
  expect(res.status).toBe(200);
  return (res.body.items as any[]).filter((i) => i.template === 'device/certificate-expiring');
}

describe('certificate expiry warnings', () => {
  it('warns the account once of each current certificate expiring within 30 days: not a superseded one, not a revoked thing', async () => {
    const plain = await enrollDevice(gw, account);
    const renewedThing = await enrollDevice(gw, account);
    const revokedThing = await enrollDevice(gw, account);
    const elsewhere = await enrollDevice(gw, other);
    const renewal = await mtls(gw, 'POST', `/ddi/v1/${renewedThing.thingId}/certificate/renew`, { cert: renewedThing.certPem, key: renewedThing.keyPem }, { csr: (await newKey()).csr });
    expect(renewal.status).toBe(201);
    await revokeDevice(gw, account, revokedThing.thingId);

    // 45 days left: nothing to say yet
    await runSweep();
    expect((await gw.db.sql`select count(*)::int as n from device_certificates where expiry_warned_at is not null`)[0].n).toBe(0);
    expect(await feed(account)).toEqual([]);

    clock.advance(20 * DAY);
    await runSweep();
    await runSweep();
    // the account's feed: the plain device's certificate and the renewal (the newest of its thing), once each
    const items = await waitFor(async () => {
      const found = await feed(account);
      return found.length >= 2 ? found : undefined;
    }, 15_000, 'two expiry notifications');
    expect(items).toHaveLength(2);
    const bySerial = Object.fromEntries(items.map((i) => [i.data.serial, i]));
    expect(Object.keys(bySerial).sort()).toEqual([plain.serial, renewal.body.serial].sort());
    const warning = bySerial[plain.serial];
    expect(warning).toMatchObject({
      scope: 'tenant', accountId: account.id, severity: 'warning', categoryId: 'devices', actionUrl: `/things/${plain.thingId}`,
      data: { thingId: plain.thingId, serial: plain.serial, notAfter: expect.any(String) },
    });
    expect(Date.parse(warning.data.notAfter) - clock.now().getTime()).toBeLessThan(30 * DAY);
    expect(warning.body).toContain(`/console/things/${plain.thingId}`);
    expect(warning.title).toContain('expires on');
    // the other account hears of its own device only
    const theirs = await waitFor(async () => ((await feed(other)).length ? feed(other) : undefined), 15_000, 'other account notified');
    expect(theirs.map((i) => i.data.thingId)).toEqual([elsewhere.thingId]);

    // durable dedupe: once per certificate, however often the sweep runs
    await runSweep();
    const events = await gw.db.sql`select actor_id from domain_events where type = 'thing.certificateExpiring' and account_id = ${account.id}`;
    expect(events).toHaveLength(2);
    expect(await feed(account)).toHaveLength(2);
    const marked = await gw.db.sql<{ serial: string }[]>`
      select serial from device_certificates where thing_id in ${gw.db.sql([plain.thingId, renewedThing.thingId, revokedThing.thingId])} and expiry_warned_at is not null`;
    expect(marked.map((r) => r.serial).sort()).toEqual([plain.serial, renewal.body.serial].sort());
  });
});
