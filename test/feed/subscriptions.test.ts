import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/lib/clock.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { bornThings, registerFactoryService, signed, approvedRegistrar } from './helpers.js';

/**
 * State-change subscriptions over real HTTP and Postgres: the body rules and their THM codes,
 * the secret shown once, read, list, PATCH, DELETE, the SUSPENDED rule (THM-60150), unknown ids
 * (THM-60100), and the refusal of non-public targets (no ALLOW_PRIVATE_TARGETS here).
 */
const clock = new ManualClock();
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
});
afterAll(async () => {
  await gw?.close();
});

const PATH = '/provisioning/v1/state-change-subscriptions';
const valid = { target_url: 'https://hooks.example.com/things', acknowledge_polling_still_mandatory: true };

async function create(account: TestAccount, body: Record<string, unknown> = valid) {
  const res = await gw.http.post(PATH, body, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

describe('create (POST /provisioning/v1/state-change-subscriptions)', () => {
  it('201: ACTIVE, the filter as given, and the webhook secret once; the secret is stored sealed', async () => {
    const thing = crypto.randomUUID();
    const body = await create(a, { ...valid, event_filter: { new_states: ['ACTIVATED', 'ANNIHILATED'], thing_ids: [thing] } });
    expect(body).toMatchObject({
      account_id: a.id, registrar_id: null, target_url: valid.target_url, acknowledge_polling_still_mandatory: true, status: 'ACTIVE',
      event_filter: { new_states: ['ACTIVATED', 'ANNIHILATED'], thing_ids: [thing] }, consecutive_failures: 0, suspended_at: null,
    });
    expect(body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(body.secret.slice(6), 'base64')).toHaveLength(32);
    const read = await gw.http.get(`${PATH}/${body.id}`, { token: a.viewer });
    expect(read.status).toBe(200);
    expect(read.body).not.toHaveProperty('secret');
    const [row] = await gw.db.sql<{ secret_sealed: Buffer }[]>`select secret_sealed from state_change_subscriptions where id = ${body.id}`;
    expect(row.secret_sealed.includes(Buffer.from(body.secret))).toBe(false);
    expect(row.secret_sealed.includes(Buffer.from(body.secret.slice(6), 'base64'))).toBe(false);
  });

  it('a factory service subscribes with a signed request; its webhook secret is not its access secret; its registrar scopes the subscription', async () => {
    const registrar = await approvedRegistrar(gw, a);
    const service = await registerFactoryService(gw, a, { registrarId: registrar });
    const res = await signed(gw, clock, service.creds, 'POST', PATH, valid);
    expect(res.status, res.text).toBe(201);
    expect(res.body.registrar_id).toBe(registrar);
    expect(res.body.secret).not.toBe(service.creds.secretAccessKey);
    expect(res.body.secret).not.toContain(service.creds.secretAccessKey);
    const listed = await signed(gw, clock, service.creds, 'GET', PATH);
    expect(listed.body.items.map((s: { id: string }) => s.id)).toContain(res.body.id);
  });

  it('THM-60110 (400): acknowledge_polling_still_mandatory missing, false or not the boolean true', async () => {
    for (const ack of [undefined, false, 'true', 1, null]) {
      const p = expectProblem(await gw.http.post(PATH, { target_url: valid.target_url, acknowledge_polling_still_mandatory: ack }, { token: a.admin }), 400);
      expect(p.code, String(ack)).toBe('THM-60110');
      expect(p.detail).toMatch(/acknowledge_polling_still_mandatory must be true/);
    }
  });

  it('THM-60120 (400): target_url not https:// (on create and on PATCH)', async () => {
    for (const target_url of ['http://hooks.example.com/x', 'ftp://hooks.example.com', 'hooks.example.com/x', 'HTTP://x.example', 42]) {
      const p = expectProblem(await gw.http.post(PATH, { ...valid, target_url }, { token: a.admin }), 400);
      expect(p.code, String(target_url)).toBe('THM-60120');
    }
    const s = await create(a);
    expect(expectProblem(await gw.http.patch(`${PATH}/${s.id}`, { target_url: 'http://hooks.example.com' }, { token: a.admin }), 400).code).toBe('THM-60120');
  });

  it('THM-60140 (400): event_filter with members other than new_states and thing_ids (on create and on PATCH)', async () => {
    for (const event_filter of [{ models: ['x'] }, { new_states: ['ACTIVATED'], registrar_id: 'r' }, { thing_ids: [], '': 1 }]) {
      const p = expectProblem(await gw.http.post(PATH, { ...valid, event_filter }, { token: a.admin }), 400);
      expect(p.code).toBe('THM-60140');
      expect(p.detail).toMatch(/may contain only new_states and thing_ids/);
    }
    const s = await create(a);
    expect(expectProblem(await gw.http.patch(`${PATH}/${s.id}`, { event_filter: { serials: ['1'] } }, { token: a.admin }), 400).code).toBe('THM-60140');
  });

  it('other bad input is a plain 400 naming the field: unknown state, bad thing id, unknown member, credentials in the URL', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ ...valid, event_filter: { new_states: ['FLYING'] } }, /new_states/],
      [{ ...valid, event_filter: { thing_ids: ['not-a-uuid'] } }, /thing_ids/],
      [{ ...valid, colour: 'red' }, /unknown field\(s\) colour/],
      [{ ...valid, target_url: 'https://user:pw@hooks.example.com' }, /without credentials/],
      [{ ...valid, target_url: `https://hooks.example.com/${'a'.repeat(3000)}` }, /target_url/],
    ];
    for (const [body, detail] of cases) {
      const p = expectProblem(await gw.http.post(PATH, body, { token: a.admin }), 400);
      expect(p.code).toBeUndefined();
      expect(p.detail).toMatch(detail);
    }
  });

  it('loopback, link-local and private targets are refused without ALLOW_PRIVATE_TARGETS', async () => {
    for (const host of ['127.0.0.1', '10.1.2.3', '192.168.0.10', '169.254.169.254', '[::1]', '[fe80::1]', 'localhost', 'api.localhost']) {
      const p = expectProblem(await gw.http.post(PATH, { ...valid, target_url: `https://${host}/hook` }, { token: a.admin }), 400);
      expect(p.detail, host).toMatch(/loopback, link-local or private targets/);
    }
  });

  it('each delivery checks the target again: a host that now names a loopback address is not called', async () => {
    const c = await createAccount(gw);
    const s = await create(c);
    // as if its DNS answer had changed since it was accepted (a test-only edit of the row)
    await gw.db.sql`update state_change_subscriptions set target_url = 'https://localhost:9/hook' where id = ${s.id}`;
    await bornThings(gw, c.id, 1);
    const [row] = await waitFor(async () => {
      const rows = await gw.db.sql<{ last_error: string | null; last_status: number | null }[]>`select last_error, last_status from webhook_deliveries where subscription_id = ${s.id}`;
      return rows[0]?.last_error ? rows : undefined;
    }, 30_000, 'the refused attempt');
    expect(row.last_status).toBeNull();
    // refused, without naming the address the name resolved to (issue 37)
    expect(row.last_error).toMatch(/https:\/\/localhost:9 is a refused target: the host name resolves to an address that is not public/);
    expect(row.last_error).not.toMatch(/127\.0\.0\.1|::1/);
  });

  it('only users who may write (admin, operator) and factory services create; 401 without credentials', async () => {
    expect((await gw.http.post(PATH, valid, { token: a.operator })).status).toBe(201);
    expect(expectProblem(await gw.http.post(PATH, valid, { token: a.viewer }), 403).detail).toMatch(/StateChangeSubscription:Create/);
    expectProblem(await gw.http.post(PATH, valid), 401);
  });
});

describe('read, list, PATCH, DELETE', () => {
  it('THM-60100 (404): unknown id, not an id, another account\'s subscription', async () => {
    const theirs = await create(b);
    for (const id of [crypto.randomUUID(), 'nope', theirs.id]) {
      for (const res of [
        await gw.http.get(`${PATH}/${id}`, { token: a.viewer }),
        await gw.http.patch(`${PATH}/${id}`, { status: 'ACTIVE' }, { token: a.admin }),
        await gw.http.delete(`${PATH}/${id}`, { token: a.admin }),
      ]) expect(expectProblem(res, 404).code).toBe('THM-60100');
    }
    expect((await gw.http.get(`${PATH}/${theirs.id}`, { token: b.viewer })).status).toBe(200);
  });

  it('list: keyset pages of the account\'s subscriptions only', async () => {
    const c = await createAccount(gw);
    const ids = [(await create(c)).id, (await create(c)).id, (await create(c)).id].sort();
    await create(b);
    const first = await gw.http.get(`${PATH}?limit=2`, { token: c.viewer });
    expect(first.body.items.map((s: { id: string }) => s.id)).toEqual(ids.slice(0, 2));
    const second = await gw.http.get(`${PATH}?limit=2&after=${first.body.next_cursor}`, { token: c.viewer });
    expect(second.body).toMatchObject({ next_cursor: null });
    expect(second.body.items.map((s: { id: string }) => s.id)).toEqual(ids.slice(2));
  });

  it('PATCH changes target_url and event_filter; an empty filter means every change', async () => {
    const s = await create(a, { ...valid, event_filter: { new_states: ['ACTIVATED'] } });
    const res = await gw.http.patch(`${PATH}/${s.id}`, { target_url: 'https://other.example.com/h', event_filter: { thing_ids: [] } }, { token: a.operator });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ target_url: 'https://other.example.com/h', event_filter: null, status: 'ACTIVE' });
    expect(expectProblem(await gw.http.patch(`${PATH}/${s.id}`, {}, { token: a.operator }), 400).detail).toMatch(/at least one/);
  });

  it('SUSPENDED accepts only PATCH status=ACTIVE: any other edit, and DELETE, is THM-60150 (409) and changes nothing', async () => {
    const s = await create(a, { ...valid, event_filter: { new_states: ['ACTIVATED'] } });
    const suspended = await gw.http.patch(`${PATH}/${s.id}`, { status: 'SUSPENDED' }, { token: a.admin });
    expect(suspended.body).toMatchObject({ status: 'SUSPENDED', suspended_reason: 'owner' });
    expect(suspended.body.suspended_at).toEqual(expect.any(String));

    for (const body of [{ target_url: 'https://x.example.com' }, { event_filter: null }, { status: 'SUSPENDED' }, { status: 'ACTIVE', target_url: 'https://x.example.com' }]) {
      const p = expectProblem(await gw.http.patch(`${PATH}/${s.id}`, body, { token: a.admin }), 409);
      expect(p.code, JSON.stringify(body)).toBe('THM-60150');
      expect(p.detail).toMatch(/only change it accepts is PATCH \{"status":"ACTIVE"\}/);
    }
    expect(expectProblem(await gw.http.delete(`${PATH}/${s.id}`, { token: a.admin }), 409).code).toBe('THM-60150');
    const unchanged = await gw.http.get(`${PATH}/${s.id}`, { token: a.viewer });
    expect(unchanged.body).toMatchObject({ status: 'SUSPENDED', target_url: valid.target_url, event_filter: { new_states: ['ACTIVATED'] } });

    const active = await gw.http.patch(`${PATH}/${s.id}`, { status: 'ACTIVE' }, { token: a.admin });
    expect(active.body).toMatchObject({ status: 'ACTIVE', suspended_at: null, suspended_reason: null, consecutive_failures: 0 });
    const both = await gw.http.patch(`${PATH}/${s.id}`, { status: 'ACTIVE', target_url: 'https://x.example.com' }, { token: a.admin });
    expect(both.status, both.text).toBe(200);
    expect(both.body.target_url).toBe('https://x.example.com');
  });

  it('DELETE: 204, then THM-60100; the row and its actor are gone', async () => {
    const s = await create(a);
    const res = await gw.http.delete(`${PATH}/${s.id}`, { token: a.operator });
    expect(res.status).toBe(204);
    expect(expectProblem(await gw.http.get(`${PATH}/${s.id}`, { token: a.viewer }), 404).code).toBe('THM-60100');
    expect(await gw.db.sql`select 1 from state_change_subscriptions where id = ${s.id}`).toHaveLength(0);
    expect(await gw.db.sql`select 1 from actors where type = 'subscription' and id = ${s.id}`).toHaveLength(0);
  });
});
