import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway, type HttpResponse } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup } from '../helpers/devices.js';
import { ClaimBatcher, type ClaimOutcome, type PendingClaim } from '../../src/trust/claimBatch.js';
import { DomainError } from '../../src/lib/errors.js';

// Issue #21 item 2: claims commit together in batches; one bad claim must fail alone.

let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway();
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
  // rules of this test database that input validation does not know: a check constraint (the
  // claim's fault) and a trigger failing like a fault of ours, each for one reserved serial
  await gw.db.sql.unsafe(`
    alter table things add constraint things_serial_not_reserved check (serial not like 'RESERVED-%') not valid;
    create function fail_broken_serial() returns trigger language plpgsql as $$
      begin
        if new.serial like 'BROKEN-%' then raise exception 'disk on fire'; end if;
        return new;
      end $$;
    create trigger things_fail_broken before insert on things for each row execute function fail_broken_serial();`);
});
afterAll(async () => gw?.close());

const claimBody = (secret: string, serial: string) => ({ provisioningMethod: 'claim_token', claimSecret: secret, manufacturer: 'Acme', model: 'FFF1:8001', serial });
const claim = (secret: string, serial: string) => gw.http.post('/ddi/v1/enroll', claimBody(secret, serial));

async function certificatesOfGroup(groupId: string): Promise<number> {
  const [row] = await gw.db.sql<{ n: number }[]>`
    select count(*)::int as n from device_certificates c join things t on t.id = c.thing_id where t.claim_group_id = ${groupId}`;
  return row.n;
}

/** 20 valid claims of each account sent at once beside `bad` (all concurrent). */
async function besideTwoAccounts(bad: (secretOfA: string) => Promise<HttpResponse>) {
  const [ga, gb] = await Promise.all([createClaimGroup(gw, a), createClaimGroup(gw, b)]);
  const run = crypto.randomUUID().slice(0, 8);
  const valid = Array.from({ length: 40 }, (_, i) => (i % 2 ? claim(gb.sharedSecret, `B-${run}-${i}`) : claim(ga.sharedSecret, `A-${run}-${i}`)));
  const [poisoned, ...results] = await Promise.all([bad(ga.sharedSecret), ...valid]);
  return { poisoned, results, ga, gb };
}

describe('claim batch isolation over HTTP', () => {
  it('a claim holding a lone surrogate gets 400; 40 valid claims of two accounts sent with it succeed', async () => {
    const { poisoned, results, ga, gb } = await besideTwoAccounts((secret) =>
      // "\ud800" is valid JSON but no Unicode text: Postgres cannot store it
      gw.http.post('/ddi/v1/enroll', undefined, { raw: JSON.stringify(claimBody(secret, 'SURROGATE')).replace('SURROGATE', 'X\\ud800') }));
    expect(expectProblem(poisoned, 400).detail).toMatch(/serial.*surrogate/);
    expect(results.map((r) => r.status)).toEqual(Array(40).fill(200));
    expect(new Set(results.map((r) => r.body.twinTopicPrefix)).size).toBe(40);
    expect([await certificatesOfGroup(ga.id), await certificatesOfGroup(gb.id)]).toEqual([20, 20]);
  });

  it('a claim the database refuses (check constraint) gets 422; the others succeed', async () => {
    const { poisoned, results, ga, gb } = await besideTwoAccounts((secret) => claim(secret, 'RESERVED-1'));
    expect(expectProblem(poisoned, 422).detail).toContain('things_serial_not_reserved');
    expect(results.map((r) => r.status)).toEqual(Array(40).fill(200));
    expect([await certificatesOfGroup(ga.id), await certificatesOfGroup(gb.id)]).toEqual([20, 20]);
    // the refused claim was not counted
    expect((await gw.http.get(`/api/v1/things/claim-groups/${ga.id}`, { token: a.viewer })).body.consumed).toBe(20);
  });

  it('a claim that hits a fault of ours gets 500; the others succeed', async () => {
    const { poisoned, results } = await besideTwoAccounts((secret) => claim(secret, 'BROKEN-1'));
    expectProblem(poisoned, 500);
    expect(results.map((r) => r.status)).toEqual(Array(40).fill(200));
  });
});

describe('ClaimBatcher', () => {
  async function pending(groupId: string, accountId: string, serial: string): Promise<PendingClaim> {
    const id = crypto.randomUUID();
    const key = await gw.gw.pki.generateDeviceKeyPair();
    const cert = await gw.gw.pki.signDeviceCertificate(id, key.spki, 1);
    return {
      groupId,
      thing: { id, accountId, modelId: null, manufacturer: 'Acme', model: 'm', serial },
      certificate: { serial: cert.serial, pem: cert.pem, sealedKey: null, notAfter: cert.notAfter },
    };
  }
  const kindOf = (o: ClaimOutcome) => (o instanceof DomainError ? o.kind : o);

  it('a batch that fails is committed again member by member: only the bad members fail', async () => {
    const g = await createClaimGroup(gw, a, { maxDevices: 100 });
    const serials = Array.from({ length: 20 }, (_, i) => (i === 5 ? 'RESERVED-2' : i === 9 ? 'BROKEN-2' : i === 12 ? 'LONE-\udc00' : `BATCH-${i}`));
    const claims = await Promise.all(serials.map((s) => pending(g.id, a.id, s)));
    const batcher = new ClaimBatcher(gw.gw);
    // submitted in one tick: the first two commit alone, the other 18 form one batch
    const settled = await Promise.allSettled(claims.map((c) => batcher.submit(c)));
    const outcomes = settled.map((s) => (s.status === 'fulfilled' ? kindOf(s.value) : 'rejected'));
    expect(outcomes).toEqual(serials.map((_, i) => (i === 5 ? 'unprocessable' : i === 9 ? 'rejected' : i === 12 ? 'invalid' : 'claimed')));
    expect(await certificatesOfGroup(g.id)).toBe(17);
    expect((await gw.http.get(`/api/v1/things/claim-groups/${g.id}`, { token: a.viewer })).body.consumed).toBe(17);
  });

  it('the machine takes the claims that fit and nothing is written for the others', async () => {
    const g = await createClaimGroup(gw, a, { maxDevices: 5 });
    const claims = await Promise.all(Array.from({ length: 12 }, (_, i) => pending(g.id, a.id, `FIT-${i}`)));
    const batcher = new ClaimBatcher(gw.gw);
    const outcomes = (await Promise.all(claims.map((c) => batcher.submit(c)))).map(kindOf);
    // two batches may commit concurrently (one per transaction slot), so which 5 get in depends on
    // who locks the group first; within one batch the machine takes them in arrival order
    expect(outcomes.filter((o) => o === 'claimed')).toHaveLength(5);
    expect(outcomes.filter((o) => o === 'refused')).toHaveLength(7);
    const claimed = claims.filter((_, i) => outcomes[i] === 'claimed');
    const refused = claims.filter((_, i) => outcomes[i] === 'refused');
    const things = await gw.db.sql<{ serial: string }[]>`select serial from things where claim_group_id = ${g.id} order by serial`;
    expect(things.map((t) => t.serial)).toEqual(claimed.map((c) => c.thing.serial).sort());
    expect(await gw.db.sql`select 1 from device_certificates where serial in ${gw.db.sql(refused.map((c) => c.certificate.serial))}`).toHaveLength(0);
    expect(await gw.db.sql`select 1 from device_certificates where serial in ${gw.db.sql(claimed.map((c) => c.certificate.serial))}`).toHaveLength(5);
  });
});
