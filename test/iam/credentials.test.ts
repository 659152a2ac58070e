import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { svcHeaders } from './helpers.js';

let gw: TestGateway;
let acct: TestAccount;
let other: TestAccount;
beforeAll(async () => {
  gw = await startTestGateway();
  acct = await createAccount(gw);
  other = await createAccount(gw);
});
afterAll(() => gw?.close());

const base = () => `/iam/v1/accounts/${acct.id}/credentials`;

describe('static credentials', () => {
  it('create answers the spec fields and formats; the secret is stored only as a SHA-256 hash', async () => {
    const res = await gw.http.post(base(), { principal_id: 'alice', description: 'ci pipeline' }, { token: acct.admin });
    expect(res.status).toBe(201);
    const c = res.body;
    expect(c).toMatchObject({ status: 'ACTIVE', principal_id: 'alice', description: 'ci pipeline', expires_at: null });
    expect(c.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(c.access_key_id).toMatch(/^AKSV[0-9A-F]{16}$/);
    expect(c.secret_key).toMatch(/^[A-Za-z0-9_-]{54}$/);
    expect(Buffer.from(c.secret_key, 'base64url')).toHaveLength(40);
    expect(new Date(c.created_at).toISOString()).toBe(c.created_at);
    const [row] = await gw.db.sql`select secret_hash from iam_credentials where id = ${c.id}`;
    expect(Buffer.from(row.secret_hash as Buffer).equals(crypto.createHash('sha256').update(c.secret_key).digest())).toBe(true);
    const dump = JSON.stringify(await gw.db.sql`select * from iam_credentials`) + JSON.stringify(await gw.db.sql`select * from actors`) + JSON.stringify(await gw.db.sql`select * from domain_events`);
    expect(dump).not.toContain(c.secret_key);
    const [actor] = await gw.db.sql`select state from actors where type = 'staticCredential' and id = ${c.id}`;
    expect(actor.state).toBe('ACTIVE');
    // the row's status is the machine's state, projected by the store
    expect((await gw.db.sql`select status from iam_credentials where id = ${c.id}`)[0].status).toBe('ACTIVE');
  });

  it('list, get, update (status, description) and delete (204); the secret is never shown again', async () => {
    const created = (await gw.http.post(base(), { principal_id: 'bob' }, { token: acct.admin })).body;
    expect(created.description).toBe('');
    const list = await gw.http.get(`${base()}?principal_id=bob`, { token: acct.admin });
    expect(list.status).toBe(200);
    expect(list.body.map((c: any) => c.id)).toEqual([created.id]);
    expect(list.body[0].secret_key).toBeUndefined();
    const got = await gw.http.get(`${base()}/${created.id}`, { token: acct.admin });
    expect(got.body).toMatchObject({ id: created.id, access_key_id: created.access_key_id, status: 'ACTIVE' });
    expect(got.body.secret_key).toBeUndefined();

    const off = await gw.http.put(`${base()}/${created.id}`, { status: 'INACTIVE', description: 'paused' }, { token: acct.admin });
    expect(off.status).toBe(200);
    expect(off.body).toMatchObject({ status: 'INACTIVE', description: 'paused' });
    const [actor] = await gw.db.sql`select state from actors where type = 'staticCredential' and id = ${created.id}`;
    expect(actor.state).toBe('INACTIVE');
    const same = await gw.http.put(`${base()}/${created.id}`, { status: 'INACTIVE' }, { token: acct.admin });
    expect(same.body).toMatchObject({ status: 'INACTIVE', description: 'paused' });
    // the machine refused the repeated DEACTIVATE: one transition, one event, the snapshot untouched
    const events = await gw.db.sql`select type from domain_events where actor_type = 'staticCredential' and actor_id = ${created.id} order by seq`;
    expect(events.map((e) => e.type)).toEqual(['credential.created', 'credential.deactivated']);
    expect((await gw.db.sql`select version from actors where type = 'staticCredential' and id = ${created.id}`)[0].version).toBe(2);
    // the description alone changes without a transition
    expect((await gw.http.put(`${base()}/${created.id}`, { status: 'INACTIVE', description: 'still paused' }, { token: acct.admin })).body).toMatchObject({ status: 'INACTIVE', description: 'still paused' });
    expect((await gw.http.put(`${base()}/${created.id}`, { status: 'ACTIVE' }, { token: acct.admin })).body.status).toBe('ACTIVE');

    const del = await gw.http.delete(`${base()}/${created.id}`, { token: acct.admin });
    expect(del.status).toBe(204);
    expect(del.text).toBe('');
    // the machine ended in `deleted`; the row and its hash are gone
    expect((await gw.db.sql`select state from actors where type = 'staticCredential' and id = ${created.id}`)[0].state).toBe('deleted');
    expect(await gw.db.sql`select 1 from iam_credentials where id = ${created.id}`).toHaveLength(0);
    expectProblem(await gw.http.get(`${base()}/${created.id}`, { token: acct.admin }), 404);
    expectProblem(await gw.http.delete(`${base()}/${created.id}`, { token: acct.admin }), 404);
    const res = await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(created) });
    expect(expectProblem(res, 401).detail).toMatch(/not found/);
  });

  it('at most 2 per IAM user per account (409), per user and per account', async () => {
    for (let i = 0; i < 2; i++) expect((await gw.http.post(base(), { principal_id: 'carol' }, { token: acct.admin })).status).toBe(201);
    const third = expectProblem(await gw.http.post(base(), { principal_id: 'carol' }, { token: acct.admin }), 409);
    expect(third.detail).toMatch(/limit is 2/);
    expect((await gw.http.post(base(), { principal_id: 'carol2' }, { token: acct.admin })).status).toBe(201);
    expect((await gw.http.post(`/iam/v1/accounts/${other.id}/credentials`, { principal_id: 'carol' }, { token: other.admin })).status).toBe(201);
  });

  it('the limit holds under concurrency', async () => {
    const results = await Promise.all(Array.from({ length: 8 }, () => gw.http.post(base(), { principal_id: 'dave' }, { token: acct.admin })));
    expect(results.filter((r) => r.status === 201)).toHaveLength(2);
    for (const r of results.filter((r) => r.status !== 201)) expectProblem(r, 409);
    const [{ n }] = await gw.db.sql`select count(*)::int as n from iam_credentials where account_id = ${acct.id} and principal_id = 'dave'`;
    expect(n).toBe(2);
  });

  it('only account admins manage credentials; other accounts are 404', async () => {
    for (const token of [acct.operator, acct.viewer]) {
      expect(expectProblem(await gw.http.post(base(), { principal_id: 'x' }, { token }), 403).detail).toMatch(/insufficient role/);
      expectProblem(await gw.http.get(base(), { token }), 403);
    }
    expectProblem(await gw.http.get(base(), { token: other.admin }), 404);
    expectProblem(await gw.http.post(base(), { principal_id: 'x' }, { token: other.admin }), 404);
    expectProblem(await gw.http.get(base()), 401);
  });

  it('bad input is a 400 problem with a clear detail', async () => {
    expect(expectProblem(await gw.http.post(base(), {}, { token: acct.admin }), 400).detail).toMatch(/principal_id/);
    expect(expectProblem(await gw.http.post(base(), { principal_id: 'x', extra: 1 }, { token: acct.admin }), 400).detail).toMatch(/extra/);
    expect(expectProblem(await gw.http.post(base(), { principal_id: '' }, { token: acct.admin }), 400).detail).toMatch(/principal_id/);
    expectProblem(await gw.http.post(base(), undefined, { token: acct.admin, raw: '{bad', headers: { 'content-type': 'application/json' } }), 400);
    const created = (await gw.http.post(base(), { principal_id: 'erin' }, { token: acct.admin })).body;
    expect(expectProblem(await gw.http.put(`${base()}/${created.id}`, { status: 'DISABLED' }, { token: acct.admin }), 400).detail).toMatch(/status/);
    expect(expectProblem(await gw.http.put(`${base()}/${created.id}`, { description: 'x' }, { token: acct.admin }), 400).detail).toMatch(/status/);
    expectProblem(await gw.http.get(`${base()}/not-a-uuid`, { token: acct.admin }), 400);
    expectProblem(await gw.http.put(`${base()}/${crypto.randomUUID()}`, { status: 'ACTIVE' }, { token: acct.admin }), 404);
  });
});
