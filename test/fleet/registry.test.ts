import crypto from 'node:crypto';
import mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signedFetch, type Credentials } from '../../src/clients/svcSigner.js';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, revokeDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';

/**
 * The fleet registry over real HTTP (issue 18, item 1): GET /api/v1/things with every filter and
 * sort, keyset paging of a 10,000-thing account with concurrent inserts, GET /api/v1/things/{id}
 * with a real MQTT device, tags, claim groups listed, and thingId in the enrollment responses.
 */
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;
let pid = 0x5100;

beforeAll(async () => {
  gw = await startTestGateway();
  [a, b] = await Promise.all([createAccount(gw, { capabilities: ['enroll_things'] }), createAccount(gw, { capabilities: ['enroll_things'] })]);
});
afterAll(async () => gw?.close());

async function model(account: TestAccount): Promise<{ id: string; descriptor: string }> {
  const res = await gw.http.post('/api/v1/models', { vid: 'FFF7', pid: (pid++).toString(16).toUpperCase(), name: 'Fleet Sensor', provisioning_method: 'none' }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

/** Things inserted in bulk SQL (fixture rows: the registry only reads them). */
async function insertThings(accountId: string, n: number, opts: { model?: { id: string; descriptor: string }; prefix?: string; state?: string } = {}): Promise<string[]> {
  const rows = await gw.db.sql<{ id: string }[]>`
    insert into things (id, account_id, model_id, manufacturer, model, serial, lifecycle_state, created_at)
    select gen_random_uuid(), ${accountId}, ${opts.model?.id ?? null}, 'Bulk', ${opts.model?.descriptor ?? 'bulk-model'},
      ${opts.prefix ?? crypto.randomUUID().slice(0, 8)} || '-' || i, ${opts.state ?? 'ACTIVATED'},
      -- every 3rd shares one timestamp (ties broken by id), the rest spread over a day
      case when i % 3 = 0 then timestamptz '2026-01-01T00:00:00Z' else timestamptz '2026-01-01T00:00:00Z' + i * interval '7 seconds' end
    from generate_series(1, ${n}) i returning id`;
  return rows.map((r) => r.id);
}

async function pageAll(token: string, query: string, limit: number, between?: () => Promise<void>): Promise<any[]> {
  const seen: any[] = [];
  let cursor: string | null = null;
  do {
    const res: any = await gw.http.get(`/api/v1/things?limit=${limit}&${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { token });
    expect(res.status, res.text).toBe(200);
    seen.push(...res.body.items);
    cursor = res.body.next_cursor;
    if (between) await between();
  } while (cursor);
  return seen;
}

const ids = (items: any[]) => items.map((t) => t.id);

describe('GET /api/v1/things paging', () => {
  it('a 10,000-thing account paged through for every sort: no gap, no repeat, in order, while things are inserted', async () => {
    const big = await createAccount(gw);
    const original = await insertThings(big.id, 10_000);
    // last seen for two thirds of them, with ties; the rest never connected
    await gw.db.sql`
      insert into device_connectivity (thing_id, connected, last_seen)
      select id::text, random() < 0.5, timestamptz '2026-02-01T00:00:00Z' + (row_number() over (order by id) % 500) * interval '1 second'
      from things where account_id = ${big.id} and random() < 0.66`;
    const inserted: string[] = [];
    const insertSome = async () => { inserted.push(...await insertThings(big.id, 25)); };

    for (const sort of ['created_at', '-created_at', 'last_seen', '-last_seen']) {
      const items = await pageAll(big.viewer, `sort=${sort}`, 500, insertSome);
      const seen = ids(items);
      expect(new Set(seen).size, `${sort}: repeats`).toBe(seen.length);
      const seenSet = new Set(seen);
      expect(original.filter((id) => !seenSet.has(id)), `${sort}: gaps`).toEqual([]);
      // only things of this account, and nothing but originals and concurrent inserts
      const known = new Set([...original, ...inserted]);
      expect(seen.every((id) => known.has(id))).toBe(true);
      // in the order asked for: (key, id) strictly monotonic
      const key = (t: any) => sort.endsWith('last_seen') ? (t.last_seen ?? '') : t.created_at;
      const sign = sort.startsWith('-') ? -1 : 1;
      for (let i = 1; i < items.length; i++) {
        const [p, q] = [items[i - 1], items[i]];
        const cmp = key(p) < key(q) ? -1 : key(p) > key(q) ? 1 : p.id < q.id ? -1 : 1;
        expect(cmp * sign, `${sort} order at ${i}`).toBe(-1);
      }
    }
    expect(inserted.length).toBeGreaterThan(0);
  }, 60_000);

  it('a cursor is opaque, bound to its sort, and refused with 400 when forged', async () => {
    await insertThings(a.id, 3);
    const first = await gw.http.get('/api/v1/things?limit=1&sort=-created_at', { token: a.viewer });
    expect(first.status).toBe(200);
    const cursor = first.body.next_cursor;
    expect(cursor).toEqual(expect.any(String));
    expect(expectProblem(await gw.http.get(`/api/v1/things?sort=last_seen&cursor=${cursor}`, { token: a.viewer }), 400).detail).toMatch(/sort=-created_at/);
    expectProblem(await gw.http.get('/api/v1/things?cursor=garbage', { token: a.viewer }), 400);
    const forged = Buffer.from(JSON.stringify({ s: 'created_at', k: "now()'; drop table things; --", i: crypto.randomUUID() })).toString('base64url');
    expect(expectProblem(await gw.http.get(`/api/v1/things?cursor=${forged}`, { token: a.viewer }), 400).detail).toMatch(/cursor/);
    const badKey = Buffer.from(JSON.stringify({ s: 'created_at', k: '2026-99-99 99:99:99+00', i: crypto.randomUUID() })).toString('base64url');
    expect(expectProblem(await gw.http.get(`/api/v1/things?cursor=${badKey}`, { token: a.viewer }), 400).detail).toMatch(/not a valid date/);
    expectProblem(await gw.http.get('/api/v1/things?last_seen_before=2026-02-30T00:00:00Z', { token: a.viewer }), 400);
    for (const q of ['limit=0', 'limit=501', 'sort=name', 'state=FLYING', 'connected=yes', 'last_seen_before=yesterday', 'claim_group=nope', 'colour=red']) {
      expect(expectProblem(await gw.http.get(`/api/v1/things?${q}`, { token: a.viewer }), 400).detail, q).toBeTruthy();
    }
  });
});

describe('GET /api/v1/things filters', () => {
  it('state, model (id or descriptor), claim group, connected, revoked, last seen, tags; another account sees none', async () => {
    const acc = await createAccount(gw, { capabilities: ['enroll_things'] });
    const m = await model(acc);
    const [activated] = await insertThings(acc.id, 1, { state: 'ACTIVATED', model: m });
    const [deactivated] = await insertThings(acc.id, 1, { state: 'DEACTIVATED', model: m });
    const [inFactory] = await insertThings(acc.id, 1, { state: 'IN_FACTORY' });
    const group = await createClaimGroup(gw, acc);
    const claimed = await enrollDevice(gw, acc, { claimSecret: group.sharedSecret });
    const revoked = await enrollDevice(gw, acc, { claimSecret: group.sharedSecret });
    await revokeDevice(gw, acc, revoked.thingId);
    await gw.db.sql`insert into device_connectivity (thing_id, connected, last_seen) values
      (${activated}, true, '2026-03-01T10:00:00Z'), (${deactivated}, false, '2026-03-01T08:00:00Z'), (${inFactory}, false, null)`;
    for (const tag of ['north', 'roof']) expect((await gw.http.put(`/api/v1/things/${activated}/tags/${tag}`, undefined, { token: acc.operator })).status).toBe(200);
    expect((await gw.http.put(`/api/v1/things/${deactivated}/tags/north`, undefined, { token: acc.operator })).status).toBe(200);

    const list = async (q: string) => {
      const res = await gw.http.get(`/api/v1/things?${q}`, { token: acc.viewer });
      expect(res.status, `${q}: ${res.text}`).toBe(200);
      return ids(res.body.items).sort();
    };
    const sorted = (...x: string[]) => [...x].sort();
    expect(await list('')).toEqual(sorted(activated, deactivated, inFactory, claimed.thingId, revoked.thingId));
    expect(await list('state=ACTIVATED,DEACTIVATED')).toEqual(sorted(activated, deactivated));
    expect(await list('state=ROLLEDOFF')).toEqual(sorted(claimed.thingId, revoked.thingId));
    expect(await list(`model=${m.id}`)).toEqual(sorted(activated, deactivated));
    expect(await list(`model=${m.descriptor}`)).toEqual(sorted(activated, deactivated));
    expect(await list(`claim_group=${group.id}`)).toEqual(sorted(claimed.thingId, revoked.thingId));
    expect(await list('connected=true')).toEqual([activated]);
    expect(await list('connected=false')).toEqual(sorted(deactivated, inFactory, claimed.thingId, revoked.thingId));
    expect(await list('revoked=true')).toEqual([revoked.thingId]);
    expect(await list('revoked=false')).toEqual(sorted(activated, deactivated, inFactory, claimed.thingId));
    expect(await list('last_seen_before=2026-03-01T09:00:00Z')).toEqual([deactivated]);
    expect(await list('last_seen_after=2026-03-01T09:00:00%2B00:00')).toEqual([activated]);
    expect(await list('last_seen_after=2026-03-01T07:00:00Z&last_seen_before=2026-03-01T11:00:00Z')).toEqual(sorted(activated, deactivated));
    expect(await list('tags=north')).toEqual(sorted(activated, deactivated));
    expect(await list('tags=north,roof')).toEqual([activated]);
    expect(await list('tags=south')).toEqual([]);
    expect(await list('state=ACTIVATED&connected=false')).toEqual([]);
    // sort by last seen: never-seen first ascending, last descending
    const bySeen = ids((await gw.http.get('/api/v1/things?sort=-last_seen&limit=2', { token: acc.viewer })).body.items);
    expect(bySeen).toEqual([activated, deactivated]);

    const item = (await gw.http.get(`/api/v1/things?claim_group=${group.id}&revoked=false`, { token: acc.viewer })).body.items[0];
    expect(item).toMatchObject({
      id: claimed.thingId, state: 'ROLLEDOFF', claim_group_id: group.id, enrolled_by: 'claim_token', revoked: false, connected: false, last_seen: null, tags: [],
      certificate: { serial: claimed.serial, revoked: false },
    });
    expect(Date.parse(item.certificate.not_after)).toBeGreaterThan(Date.now());
    // another account's list has none of them
    const theirs = ids((await gw.http.get('/api/v1/things?limit=500', { token: b.viewer })).body.items);
    expect(theirs.filter((id) => [activated, deactivated, inFactory, claimed.thingId].includes(id))).toEqual([]);
  });
});

describe('GET /api/v1/things/{id}', () => {
  it('identity, state, certificate, live connectivity, twin versions and latest telemetry of a device on MQTT', async () => {
    const d = await enrollDevice(gw, a);
    const before = await gw.http.get(`/api/v1/things/${d.thingId}`, { token: a.viewer });
    expect(before.status, before.text).toBe(200);
    expect(before.body).toMatchObject({
      id: d.thingId, manufacturer: 'Acme', model: 'sensor-1', state: 'ROLLEDOFF', revoked: false, connected: false,
      certificate: { serial: d.serial, revoked: false }, connectivity: null, twin: null, telemetry: null, metadata: {},
    });
    const client = await mqtt.connectAsync(`mqtts://127.0.0.1:${d.response.mqttBrokerPort}`, {
      key: d.keyPem, cert: d.certPem, ca: d.response.caBundlePem, servername: 'localhost', rejectUnauthorized: true,
      clientId: d.thingId, username: d.thingId, protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 10_000,
    });
    try {
      await client.publishAsync(`${d.response.twinTopicPrefix}/telemetry`, JSON.stringify({ temperature: 21.5 }), { qos: 1 });
      await client.publishAsync(`${d.response.twinTopicPrefix}/twin/reported`, JSON.stringify({ firmware: '1.2.3' }), { qos: 1 });
      const seen = await waitFor(async () => {
        const res = await gw.http.get(`/api/v1/things/${d.thingId}`, { token: a.viewer });
        return res.body.telemetry && res.body.twin ? res.body : undefined;
      });
      expect(seen).toMatchObject({
        connected: true, connectivity: { connected: true, protocol_version: 5 },
        telemetry: { values: { temperature: 21.5 } }, twin: { reported_version: 1, desired_version: 0 },
      });
      expect(seen.last_seen).toEqual(expect.any(String));
      expect(ids((await gw.http.get('/api/v1/things?connected=true&limit=500', { token: a.viewer })).body.items)).toContain(d.thingId);
    } finally {
      await client.endAsync(true);
    }
    // after the device is gone: disconnected, last seen kept
    const after = await waitFor(async () => {
      const res = await gw.http.get(`/api/v1/things/${d.thingId}`, { token: a.viewer });
      return res.body.connected === false ? res.body : undefined;
    });
    expect(after.connectivity.disconnected_at).toEqual(expect.any(String));
    expect(after.last_seen).toEqual(expect.any(String));
  });

  it('404 for another account\'s thing, an unknown id; 400 for a malformed one', async () => {
    const [mine] = await insertThings(a.id, 1);
    expectProblem(await gw.http.get(`/api/v1/things/${mine}`, { token: b.admin }), 404);
    expectProblem(await gw.http.get(`/api/v1/things/${crypto.randomUUID()}`, { token: a.viewer }), 404);
    expectProblem(await gw.http.get('/api/v1/things/not-a-uuid', { token: a.viewer }), 400);
    expectProblem(await gw.http.get(`/api/v1/things/${mine}`), 401);
  });

  it('a factory service reads only the things of its model', async () => {
    const m = await model(a);
    const other = await model(a);
    const [own] = await insertThings(a.id, 1, { model: m });
    const [foreign] = await insertThings(a.id, 1, { model: other });
    const res = await gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: m.id, endpoint_url: 'https://factory.example' }, { token: a.admin });
    expect(res.status, res.text).toBe(201);
    const creds: Credentials = { accessKeyId: res.body.access_key_id, secretAccessKey: res.body.secret_access_key };
    const list = await (await signedFetch(`${gw.httpUrl}/api/v1/things?limit=500`, creds)).json() as any;
    expect(ids(list.items)).toEqual([own]);
    expect((await signedFetch(`${gw.httpUrl}/api/v1/things/${own}`, creds)).status).toBe(200);
    expect((await signedFetch(`${gw.httpUrl}/api/v1/things/${foreign}`, creds)).status).toBe(404);
    // tagging is for the account's operators and admins
    expect((await signedFetch(`${gw.httpUrl}/api/v1/things/${own}/tags/x`, creds, { method: 'PUT' })).status).toBe(403);
  });
});

describe('tags', () => {
  it('PUT and DELETE are idempotent; viewers may not; bad tags are 400 with nothing written', async () => {
    const [id] = await insertThings(a.id, 1);
    const put = await gw.http.put(`/api/v1/things/${id}/tags/line-3`, undefined, { token: a.operator });
    expect(put.status, put.text).toBe(200);
    expect(put.body).toEqual({ thing_id: id, tags: ['line-3'] });
    expect((await gw.http.put(`/api/v1/things/${id}/tags/line-3`, undefined, { token: a.admin })).body.tags).toEqual(['line-3']);
    expect((await gw.http.put(`/api/v1/things/${id}/tags/eu.west:1`, undefined, { token: a.admin })).body.tags).toEqual(['eu.west:1', 'line-3']);
    expectProblem(await gw.http.put(`/api/v1/things/${id}/tags/nope`, undefined, { token: a.viewer }), 403);
    for (const bad of ['-lead', 'has%20space', 'x'.repeat(65), '%C3%A9t%C3%A9']) {
      expectProblem(await gw.http.put(`/api/v1/things/${id}/tags/${bad}`, undefined, { token: a.operator }), 400);
    }
    expectProblem(await gw.http.put(`/api/v1/things/${id}/tags/theirs`, undefined, { token: b.operator }), 404);
    expect((await gw.http.get(`/api/v1/things/${id}`, { token: a.viewer })).body.tags).toEqual(['eu.west:1', 'line-3']);
    expect((await gw.http.delete(`/api/v1/things/${id}/tags/line-3`, { token: a.operator })).body.tags).toEqual(['eu.west:1']);
    expect((await gw.http.delete(`/api/v1/things/${id}/tags/line-3`, { token: a.operator })).body.tags).toEqual(['eu.west:1']);
    expectProblem(await gw.http.delete(`/api/v1/things/${crypto.randomUUID()}/tags/line-3`, { token: a.operator }), 404);
  });

  it('60 tags at once on one thing: exactly 50 stored, the rest 409', async () => {
    const [id] = await insertThings(a.id, 1);
    const results = await Promise.all(Array.from({ length: 60 }, (_, i) => gw.http.put(`/api/v1/things/${id}/tags/t${i}`, undefined, { token: a.operator })));
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(50);
    expect(statuses.filter((s) => s === 409)).toHaveLength(10);
    expect((await gw.db.sql`select count(*)::int as n from thing_tags where thing_id = ${id}`)[0].n).toBe(50);
  });
});

describe('GET /api/v1/things/claim-groups', () => {
  it('lists the account\'s groups in keyset pages with their status; not another account\'s', async () => {
    const acc = await createAccount(gw);
    const groups = await Promise.all([0, 1, 2].map((i) => createClaimGroup(gw, acc, { name: `line ${i}`, maxDevices: 10 + i })));
    await gw.http.delete(`/api/v1/things/claim-groups/${groups[1].id}`, { token: acc.operator });
    await createClaimGroup(gw, b);
    const first = await gw.http.get('/api/v1/things/claim-groups?limit=2', { token: acc.viewer });
    expect(first.status, first.text).toBe(200);
    expect(first.body.items).toHaveLength(2);
    const second = await gw.http.get(`/api/v1/things/claim-groups?limit=2&after=${first.body.next_cursor}`, { token: acc.viewer });
    expect(second.body.next_cursor).toBeNull();
    const all = [...first.body.items, ...second.body.items];
    expect(all.map((g: any) => g.id)).toEqual(groups.map((g) => g.id).sort());
    const revoked = all.find((g: any) => g.id === groups[1].id);
    expect(revoked).toMatchObject({ name: 'line 1', maxDevices: 11, ttlDays: 30, consumed: 0, status: 'revoked', revoked: true });
    expect(all.find((g: any) => g.id === groups[0].id)).toMatchObject({ status: 'active', revoked: false });
    expectProblem(await gw.http.get('/api/v1/things/claim-groups?after=x', { token: acc.viewer }), 400);
    expectProblem(await gw.http.get('/api/v1/things/claim-groups', { token: (await gw.token({ realm: 'platform', sub: 'p', roles: ['platform-admin'] })) }), 403);
  });
});

describe('enrollment responses carry thingId', () => {
  it('/ddi/v1/enroll and POST /api/v1/enrollments', async () => {
    const d = await enrollDevice(gw, a);
    expect(d.response.thingId).toBe(d.thingId);
    const m = await model(a);
    const res = await gw.http.post('/api/v1/enrollments', { model: m.descriptor, serial: 'TID-1' }, { token: a.operator });
    expect(res.status, res.text).toBe(201);
    expect(res.body.thingId).toBe(res.body.thing_id);
    expect(res.body.twinTopicPrefix).toBe(`devices/${res.body.thingId}`);
  });
});
