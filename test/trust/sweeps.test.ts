import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup } from '../helpers/devices.js';
import { ManualClock } from '../../src/lib/clock.js';

let gw: TestGateway;
let account: TestAccount;
const clock = new ManualClock();

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  account = await createAccount(gw);
});
afterAll(async () => gw?.close());

describe('scheduled sweeps', () => {
  it('re-signs a CRL that is getting old, and leaves a fresh one alone', async () => {
    const trust = gw.testHooks.trust;
    const first = await trust.crlNumber();
    await trust.refreshCrlIfOld();
    expect(await trust.crlNumber()).toBe(first);
    await gw.db.sql`update crl set updated_at = now() - interval '6 days 1 hour'`;
    await trust.refreshCrlIfOld();
    expect(await trust.crlNumber()).toBe(first + 1);
    // the CRL route serves the new one
    const served = new x509.X509Crl(Buffer.from(await (await fetch(`${gw.httpUrl}/api/v1/certificates/crl`)).arrayBuffer()));
    expect(served.nextUpdate!.getTime()).toBeGreaterThan(Date.now() + 6 * 86_400_000);
  });

  it('moves groups past their TTL to expired (claimGroup.expired)', async () => {
    const g = await createClaimGroup(gw, account, { ttlDays: 1 });
    clock.advance(3600_000);
    const fresh = await createClaimGroup(gw, account, { ttlDays: 1 });
    expect(await gw.testHooks.trust.expireClaimGroups()).toBe(0);
    clock.advance(86_400_000 - 3600_000);
    expect(await gw.testHooks.trust.expireClaimGroups()).toBe(1);
    expect(await gw.testHooks.trust.expireClaimGroups()).toBe(0);
    const rows = await gw.db.sql<{ id: string; state: string }[]>`select id, state from claim_groups where id in (${g.id}, ${fresh.id})`;
    expect(Object.fromEntries(rows.map((r) => [r.id, r.state]))).toEqual({ [g.id]: 'expired', [fresh.id]: 'active' });
    const events = await gw.db.sql`select 1 from domain_events where actor_id = ${g.id} and type = 'claimGroup.expired'`;
    expect(events.length).toBe(1);
    expect(await gw.testHooks.trust.accountOf('not-a-uuid')).toBeUndefined();
  });
});
