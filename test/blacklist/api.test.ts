import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRemoteJWKSet, flattenedVerify, type FlattenedJWS } from 'jose';
import { ManualClock } from '../../src/lib/clock.js';
import { signedHeaders, signingTimestamp, type Credentials } from '../../src/clients/svcSigner.js';
import { startTestGateway, expectProblem, type HttpResponse, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { ListIndex } from '../../src/blacklist/listIndex.js';

/**
 * The identity-blacklist routes over real HTTP and Postgres: every status of the spec's rows,
 * management by owners and platform operators, signed factory-service reads, deltas (cursor
 * errors, replay onto an old snapshot, writers in commit order) and the signed snapshot verified
 * against the published JWKS.
 */
const clock = new ManualClock();
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;
let operator: string;
let pid = 0x3000;
const BASE = '/api/v1/identity-blacklist';

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
  operator = await gw.token({ realm: 'platform', sub: 'ops-1', roles: ['platform-operator'] });
});
afterAll(async () => gw?.close());

/** A registered model of `account`: its id and `VID:PID` descriptor. */
async function model(account: TestAccount): Promise<{ id: string; descriptor: string }> {
  const p = (pid++).toString(16).toUpperCase();
  const res = await gw.http.post('/api/v1/models', { vid: 'FFF4', pid: p, name: 'blacklist model', provisioning_method: 'none' }, { token: account.admin });
  if (res.status !== 201) throw new Error(`model create failed: ${res.status} ${res.text}`);
  return { id: res.body.id, descriptor: `FFF4:${p}` };
}

const sn = () => `SN-${crypto.randomUUID().slice(0, 8)}`;
const add = (token: string, body: Record<string, unknown>) => gw.http.post(BASE, body, { token });
const remove = (token: string, m: string, s: string) => gw.http.delete(`${BASE}/${encodeURIComponent(m)}/${encodeURIComponent(s)}`, { token });

async function snapshot(token = a.viewer): Promise<{ jws: FlattenedJWS; payload: any; res: HttpResponse }> {
  const res = await gw.http.get(`${BASE}/snapshot.signed`, { token });
  expect(res.status, res.text).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^application\/jose\+json/);
  const jws = res.body as FlattenedJWS;
  return { jws, payload: JSON.parse(Buffer.from(jws.payload, 'base64url').toString()), res };
}

async function allDeltas(cursor: string, token = a.viewer): Promise<{ items: any[]; next: string }> {
  const items: any[] = [];
  for (;;) {
    const res = await gw.http.get(`${BASE}/deltas?cursor=${cursor}&limit=2`, { token });
    expect(res.status, res.text).toBe(200);
    items.push(...res.body.items);
    cursor = res.body.next_cursor;
    if (!res.body.has_more) return { items, next: cursor };
  }
}

describe('OpenAPI', () => {
  it('every route is in the document with its parameters; the snapshot as application/jose+json', async () => {
    const doc = (await gw.http.get('/docs/json')).body;
    for (const p of [BASE, `${BASE}/check`, `${BASE}/deltas`, `${BASE}/snapshot.signed`, `${BASE}/jwks.json`, `${BASE}/{model}/{sn}`]) expect(Object.keys(doc.paths)).toContain(p);
    expect(Object.keys(doc.paths[BASE])).toEqual(expect.arrayContaining(['get', 'post']));
    expect(doc.paths[`${BASE}/check`].get.parameters.map((p: any) => p.name)).toEqual(expect.arrayContaining(['sn', 'model']));
    expect(doc.paths[`${BASE}/deltas`].get.parameters.map((p: any) => p.name)).toEqual(expect.arrayContaining(['cursor', 'limit']));
    expect(Object.keys(doc.paths[`${BASE}/snapshot.signed`].get.responses['200'].content)).toEqual(['application/jose+json']);
  });
});

describe('management (POST and DELETE)', () => {
  it('the owner adds by model id or descriptor (stored as the descriptor); 409 when listed; removes (204) then 404', async () => {
    const m = await model(a);
    const s = sn();
    const created = await add(a.admin, { model: m.id, sn: s, reason: 'cloned key material' });
    expect(created.status, created.text).toBe(201);
    expect(created.body).toMatchObject({ model: m.descriptor, sn: s, reason: 'cloned key material', revoked_things: 0 });
    expect(created.body.added_by).toMatch(/^admin-/);
    expect(new Date(created.body.added_at).toISOString()).toBe(created.body.added_at);
    const again = await add(a.admin, { model: m.descriptor.toLowerCase(), sn: s, reason: 'again' });
    expect(expectProblem(again, 409).detail).toContain('already on the identity blacklist');
    expect((await gw.http.get(`${BASE}/check?sn=${s}`, { token: a.viewer })).status).toBe(200);
    expect((await remove(a.admin, m.descriptor, s)).status).toBe(204);
    expectProblem(await remove(a.admin, m.descriptor, s), 404);
    expectProblem(await gw.http.get(`${BASE}/check?sn=${s}`, { token: a.viewer }), 404);
  });

  it('another account may not touch the model\'s entries (403); a platform operator may, also for unregistered model names', async () => {
    const m = await model(a);
    const s = sn();
    expect(expectProblem(await add(b.admin, { model: m.descriptor, sn: s, reason: 'x' }), 403).detail).toContain(`owns model ${m.descriptor}`);
    expect(expectProblem(await add(a.admin, { model: 'sensor-unregistered', sn: s, reason: 'x' }), 403).detail).toContain('only a platform operator');
    expect((await add(operator, { model: m.descriptor, sn: s, reason: 'ops' })).status).toBe(201);
    expectProblem(await remove(b.admin, m.descriptor, s), 403);
    expect((await add(operator, { model: 'sensor-unregistered', sn: s, reason: 'counterfeit' })).status).toBe(201);
    expect((await remove(operator, 'sensor-unregistered', s)).status).toBe(204);
    // names with reserved characters travel percent-encoded in the DELETE path
    expect((await add(operator, { model: 'acme/sensor 2', sn: `${s}/a?b`, reason: 'x' })).status).toBe(201);
    expect((await remove(operator, 'acme/sensor 2', `${s}/a?b`)).status).toBe(204);
    expect((await remove(a.admin, m.descriptor, s)).status).toBe(204);
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from blacklist_entries where sn = ${s}`;
    expect(n).toBe(0);
  });

  it('roles: operators and viewers of the owner may not manage (403); without credentials 401; bad input 400 with nothing written', async () => {
    const m = await model(a);
    const s = sn();
    for (const token of [a.operator, a.viewer]) expect(expectProblem(await add(token, { model: m.descriptor, sn: s, reason: 'x' }), 403).detail).toContain('insufficient role');
    expectProblem(await gw.http.post(BASE, { model: m.descriptor, sn: s, reason: 'x' }), 401);
    expectProblem(await gw.http.delete(`${BASE}/${m.descriptor}/${s}`), 401);
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ model: m.descriptor, sn: s }, /reason/],
      [{ model: m.descriptor, sn: '', reason: 'x' }, /sn/],
      [{ model: m.descriptor, sn: 'a\u0001b', reason: 'x' }, /control characters/],
      [{ model: m.descriptor, sn: 'x'.repeat(129), reason: 'x' }, /sn/],
      [{ model: m.descriptor, sn: s, reason: 'x', colour: 'red' }, /colour/],
    ];
    for (const [body, detail] of bad) expect(expectProblem(await add(a.admin, body), 400).detail).toMatch(detail);
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from blacklist_changes where model = ${m.descriptor}`;
    expect(n).toBe(0);
  });

  it('concurrent adds of one identity: exactly one 201, the others 409, one change row', async () => {
    const m = await model(a);
    const s = sn();
    const answers = await Promise.all(Array.from({ length: 6 }, () => add(a.admin, { model: m.descriptor, sn: s, reason: 'race' })));
    expect(answers.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409]);
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from blacklist_changes where model = ${m.descriptor} and sn = ${s}`;
    expect(n).toBe(1);
  });
});

describe('GET /api/v1/identity-blacklist', () => {
  it('active entries sorted by model, sn in keyset pages; 401 without credentials; a bad cursor is 400', async () => {
    const m1 = await model(a);
    const m2 = await model(b);
    const serials = ['B-2', 'A-1', 'C-3'];
    for (const s of serials) {
      expect((await add(a.admin, { model: m1.descriptor, sn: s, reason: 'r' })).status).toBe(201);
      expect((await add(b.admin, { model: m2.descriptor, sn: s, reason: 'r' })).status).toBe(201);
    }
    expect((await remove(a.admin, m1.descriptor, 'C-3')).status).toBe(204);
    const seen: { model: string; sn: string }[] = [];
    let after: string | null = null;
    do {
      const res: HttpResponse = await gw.http.get(`${BASE}?limit=2${after ? `&after=${after}` : ''}`, { token: b.viewer });
      expect(res.status, res.text).toBe(200);
      expect(res.body.items.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.items.map((e: any) => ({ model: e.model, sn: e.sn })));
      after = res.body.next_cursor;
    } while (after);
    const sorted = [...seen].sort((x, y) => (x.model === y.model ? (x.sn < y.sn ? -1 : 1) : x.model < y.model ? -1 : 1));
    expect(seen).toEqual(sorted);
    const ours = seen.filter((e) => e.model === m1.descriptor || e.model === m2.descriptor);
    expect(ours).toEqual([
      { model: m1.descriptor, sn: 'A-1' }, { model: m1.descriptor, sn: 'B-2' },
      { model: m2.descriptor, sn: 'A-1' }, { model: m2.descriptor, sn: 'B-2' }, { model: m2.descriptor, sn: 'C-3' },
    ]);
    const filtered = await gw.http.get(`${BASE}?model=${m2.id}`, { token: a.viewer });
    expect(filtered.body.items.map((e: any) => e.sn)).toEqual(['A-1', 'B-2', 'C-3']);
    expectProblem(await gw.http.get(BASE), 401);
    expect(expectProblem(await gw.http.get(`${BASE}?after=not-ours`, { token: a.viewer }), 400).detail).toContain('next_cursor');
    expectProblem(await gw.http.get(`${BASE}?limit=0`, { token: a.viewer }), 400);
  });
});

describe('GET /api/v1/identity-blacklist/check', () => {
  it('200 with the entry when the serial is listed (any model); model narrows; 404 when not listed; 400 without a serial; 401', async () => {
    const m = await model(a);
    const s = sn();
    await add(a.admin, { model: m.descriptor, sn: s, reason: 'stolen batch' });
    const hit = await gw.http.get(`${BASE}/check?sn=${s}`, { token: b.viewer });
    expect(hit.status).toBe(200);
    expect(hit.body).toMatchObject({ model: m.descriptor, sn: s, reason: 'stolen batch' });
    expect((await gw.http.get(`${BASE}/check?sn=${s}&model=${m.descriptor.toLowerCase()}`, { token: b.viewer })).status).toBe(200);
    expect((await gw.http.get(`${BASE}/check?sn=${s}&model=${m.id}`, { token: b.viewer })).status).toBe(200);
    expect(expectProblem(await gw.http.get(`${BASE}/check?sn=${s}&model=FFF4:0001`, { token: b.viewer }), 404).detail).toContain('not on the identity blacklist');
    expectProblem(await gw.http.get(`${BASE}/check?sn=${sn()}`, { token: b.viewer }), 404);
    expect(expectProblem(await gw.http.get(`${BASE}/check`, { token: b.viewer }), 400).detail).toMatch(/sn/);
    expect(expectProblem(await gw.http.get(`${BASE}/check?model=${m.descriptor}`, { token: b.viewer }), 400).detail).toMatch(/sn/);
    expectProblem(await gw.http.get(`${BASE}/check?sn=${s}`), 401);
  });

  it('factory services read with SVC-HMAC-SHA256 signed requests; they may not manage', async () => {
    const m = await model(a);
    const s = sn();
    await add(a.admin, { model: m.descriptor, sn: s, reason: 'r' });
    const reg = await gw.http.post('/api/v1/factory-services', { role: 'identify', model_id: m.id, endpoint_url: 'https://factory.example' }, { token: a.admin });
    expect(reg.status, reg.text).toBe(201);
    const creds: Credentials = { accessKeyId: reg.body.access_key_id, secretAccessKey: reg.body.secret_access_key };
    const signed = (method: string, target: string, body?: string) => gw.http.request(method, target, undefined, {
      headers: { ...signedHeaders(creds, { method, target, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(clock.now()), body }), ...(body ? { 'content-type': 'application/json' } : {}) },
      raw: body,
    });
    const check = await signed('GET', `${BASE}/check?sn=${s}`);
    expect(check.status, check.text).toBe(200);
    expect(check.body.sn).toBe(s);
    expect((await signed('GET', `${BASE}/snapshot.signed`)).status).toBe(200);
    const list = await signed('GET', `${BASE}?limit=1`);
    expect(list.status).toBe(200);
    const denied = await signed('POST', BASE, JSON.stringify({ model: m.descriptor, sn: sn(), reason: 'x' }));
    expect(expectProblem(denied, 403).detail).toContain('policy does not allow factory:IdentityBlacklist:Add');
  });
});

describe('deltas and the signed snapshot', () => {
  it('the snapshot verifies against the published JWKS with jose; deltas replayed onto an old snapshot equal the new one', async () => {
    const jwks = createRemoteJWKSet(new URL(`${gw.httpUrl}${BASE}/jwks.json`));
    const old = await snapshot();
    const verified = await flattenedVerify(old.jws, jwks, { algorithms: ['ES256'] });
    expect(verified.protectedHeader).toMatchObject({ alg: 'ES256', typ: 'identity-blacklist-snapshot+json', kid: gw.gw.pki.blacklistKeys.kid });
    expect(JSON.parse(new TextDecoder().decode(verified.payload))).toEqual(old.payload);
    expect(old.payload.count).toBe(old.payload.entries.length);

    // changes: adds, a remove of an old entry, an add then remove, a re-add after a remove
    const m = await model(a);
    const [s1, s2, s3] = [sn(), sn(), sn()];
    await add(a.admin, { model: m.descriptor, sn: s1, reason: 'one' });
    await add(a.admin, { model: m.descriptor, sn: s2, reason: 'two' });
    await remove(a.admin, m.descriptor, s2);
    await add(a.admin, { model: m.descriptor, sn: s3, reason: 'three' });
    await remove(a.admin, m.descriptor, s1);
    await add(a.admin, { model: m.descriptor, sn: s1, reason: 'one again' });
    if (old.payload.entries.length) {
      const first = old.payload.entries[0];
      await remove(operator, first.model, first.sn);
    }

    const fresh = await snapshot();
    expect(fresh.payload.seq).toBeGreaterThan(old.payload.seq);
    await flattenedVerify(fresh.jws, jwks, { algorithms: ['ES256'] });
    const { items, next } = await allDeltas(old.payload.cursor);
    expect(items.map((c) => c.op)).toEqual(['add', 'add', 'remove', 'add', 'remove', 'add', ...(old.payload.entries.length ? ['remove'] : [])]);
    const replayed = new Map<string, any>(old.payload.entries.map((e: any) => [`${e.model}\u0000${e.sn}`, e]));
    for (const c of items) {
      const key = `${c.model}\u0000${c.sn}`;
      if (c.op === 'add') replayed.set(key, { model: c.model, sn: c.sn, reason: c.reason, added_at: c.at });
      else replayed.delete(key);
    }
    const sorted = [...replayed.values()].sort((x, y) => (x.model === y.model ? (x.sn < y.sn ? -1 : 1) : x.model < y.model ? -1 : 1));
    expect(sorted).toEqual(fresh.payload.entries);
    // the cursor of the last page is where the new snapshot stands
    expect(next).toBe(fresh.payload.cursor);
    const none = await gw.http.get(`${BASE}/deltas?cursor=${next}`, { token: a.viewer });
    expect(none.body).toEqual({ items: [], next_cursor: next, has_more: false });
  });

  it('a snapshot signed by a retired key is rebuilt with the current one', async () => {
    await gw.db.sql`update blacklist_snapshot set kid = 'retired-key'`;
    await gw.testHooks.blacklist.sweep();
    const [row] = await gw.db.sql<{ kid: string }[]>`select kid from blacklist_snapshot`;
    expect(row.kid).toBe(gw.gw.pki.blacklistKeys.kid);
    const { jws } = await snapshot();
    expect(JSON.parse(Buffer.from(jws.protected!, 'base64url').toString()).kid).toBe(gw.gw.pki.blacklistKeys.kid);
  });

  it('a tampered snapshot does not verify; If-None-Match gives 304; 401 without credentials', async () => {
    const jwks = createRemoteJWKSet(new URL(`${gw.httpUrl}${BASE}/jwks.json`));
    const { jws, payload, res } = await snapshot();
    const forged = { ...payload, entries: [] };
    await expect(flattenedVerify({ ...jws, payload: Buffer.from(JSON.stringify(forged)).toString('base64url') }, jwks)).rejects.toThrow();
    const etag = res.headers.get('etag')!;
    expect(etag).toBe(`"${payload.seq}"`);
    expect((await gw.http.get(`${BASE}/snapshot.signed`, { token: a.viewer, headers: { 'if-none-match': etag } })).status).toBe(304);
    expectProblem(await gw.http.get(`${BASE}/snapshot.signed`), 401);
    const keys = await gw.http.get(`${BASE}/jwks.json`);
    expect(keys.body.keys[0]).toMatchObject({ kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig' });
    expect(keys.body.keys[0]).not.toHaveProperty('d');
  });

  it('deltas: 400 malformed or foreign cursor, 400 without one, 401 without credentials, 410 when older than 72 hours', async () => {
    for (const cursor of ['abc', '%%%', Buffer.from('bl1:-1').toString('base64url'), Buffer.from('bl1:01').toString('base64url')]) {
      expect(expectProblem(await gw.http.get(`${BASE}/deltas?cursor=${encodeURIComponent(cursor)}`, { token: a.viewer }), 400).detail).toContain('cursor');
    }
    expect(expectProblem(await gw.http.get(`${BASE}/deltas?cursor=${Buffer.from('bl1:999999999').toString('base64url')}`, { token: a.viewer }), 400).detail).toContain('not one this gateway issued');
    expectProblem(await gw.http.get(`${BASE}/deltas`, { token: a.viewer }), 400);
    const { payload } = await snapshot();
    expectProblem(await gw.http.get(`${BASE}/deltas?cursor=${payload.cursor}`), 401);

    // a cursor stays valid while nothing after it is older than 72 hours
    clock.advance(100 * 3600_000);
    expect((await gw.http.get(`${BASE}/deltas?cursor=${payload.cursor}`, { token: a.viewer })).status).toBe(200);
    const m = await model(a);
    await add(a.admin, { model: m.descriptor, sn: sn(), reason: 'r' });
    clock.advance(71 * 3600_000);
    expect((await gw.http.get(`${BASE}/deltas?cursor=${payload.cursor}`, { token: a.viewer })).status).toBe(200);
    clock.advance(2 * 3600_000);
    const old = await gw.http.get(`${BASE}/deltas?cursor=${payload.cursor}`, { token: a.viewer });
    expect(expectProblem(old, 410).detail).toContain('older than 72 hours');
    // pruned by the sweep: still 410, and the snapshot's cursor is the way back
    const swept = await gw.testHooks.blacklist.sweep();
    expect(swept.pruned).toBeGreaterThan(0);
    expectProblem(await gw.http.get(`${BASE}/deltas?cursor=${payload.cursor}`, { token: a.viewer }), 410);
    const fresh = await snapshot();
    expect((await gw.http.get(`${BASE}/deltas?cursor=${fresh.payload.cursor}`, { token: a.viewer })).status).toBe(200);
  });

  it('writers commit in seq order: a change held open blocks the next one, and a reader skips neither', async () => {
    const m = await model(a);
    const { payload } = await snapshot();
    const [s1, s2] = [sn(), sn()];
    // a writer transaction of the gateway's kind, held open after drawing its seq
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    let drawn!: () => void;
    const hasSeq = new Promise<void>((r) => { drawn = r; });
    const slow = gw.db.sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(7211080)`;
      const at = clock.now().toISOString();
      await tx`insert into blacklist_entries (model, sn, reason, added_by, added_at) values (${m.descriptor}, ${s1}, 'slow', 'test', ${at})`;
      await tx`insert into blacklist_changes (op, model, sn, reason, by, at) values ('add', ${m.descriptor}, ${s1}, 'slow', 'test', ${at})`;
      drawn();
      await held;
    });
    await hasSeq;
    const fast = add(a.admin, { model: m.descriptor, sn: s2, reason: 'fast' });
    // the fast writer waits for the lock: a reader now sees neither change
    await waitFor(async () => {
      const [row] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from pg_locks where locktype = 'advisory' and objid = 7211080 and not granted`;
      return row.n > 0;
    }, 10_000, 'the second writer to wait for the lock');
    const during = await gw.http.get(`${BASE}/deltas?cursor=${payload.cursor}`, { token: a.viewer });
    expect(during.body.items.filter((c: any) => c.model === m.descriptor)).toEqual([]);
    release();
    await slow;
    expect((await fast).status).toBe(201);
    const after = await allDeltas(during.body.next_cursor);
    expect(after.items.filter((c: any) => c.model === m.descriptor).map((c: any) => c.sn)).toEqual([s1, s2]);
  });

  it('503 while no snapshot exists; the next change builds one, which a second node serves too; its checks follow the changes', async () => {
    const second = await startTestGateway({ NODE_ID: 'blacklist-node-b' }, { db: gw.db, clock });
    try {
      await gw.db.sql`delete from blacklist_snapshot`;
      // what a node hears when a snapshot changes: both drop their copy and read the table again
      await gw.gw.cluster.broadcast('blacklist.snapshot-changed', { seq: Number.MAX_SAFE_INTEGER });
      // the development issuer's URL is per node: node b verifies its own tokens
      const viewerB = await second.token({ realm: `acc-${a.id}`, sub: 'viewer-b', roles: ['viewer'] });
      await waitFor(async () => (await second.http.get(`${BASE}/snapshot.signed`, { token: viewerB })).status === 503, 10_000, 'node b to drop its snapshot');
      const unavailable = await gw.http.get(`${BASE}/snapshot.signed`, { token: a.viewer });
      expect(expectProblem(unavailable, 503).detail).toContain('no signed snapshot');
      const m = await model(a);
      const s = sn();
      await add(a.admin, { model: m.descriptor, sn: s, reason: 'r' });
      const built = await snapshot();
      expect(built.payload.entries.some((e: any) => e.sn === s)).toBe(true);
      const onB = await waitFor(async () => {
        const res = await second.http.get(`${BASE}/snapshot.signed`, { token: viewerB });
        return res.status === 200 ? res : undefined;
      }, 10_000, 'node b to serve the new snapshot');
      expect(onB.text).toBe(built.res.text);
      const [row] = await gw.db.sql<{ jws: string }[]>`select jws from blacklist_snapshot`;
      expect(row.jws).toBe(built.res.text);
      // node b's checks follow node a's changes (its copy of the list replays the change log)
      const checkOnB = async () => (await second.http.get(`${BASE}/check?sn=${s}`, { token: viewerB })).status;
      await waitFor(async () => (await checkOnB()) === 200, 10_000, 'node b to see the add');
      expect((await remove(a.admin, m.descriptor, s)).status).toBe(204);
      await waitFor(async () => (await checkOnB()) === 404, 10_000, 'node b to see the removal');
    } finally {
      await second.stop();
    }
  });

  it('a node\'s copy of the list that fell behind the pruning horizon loads the whole list again', async () => {
    const index = new ListIndex({ sql: gw.gw.sql, log: gw.gw.log });
    await index.catchUp();
    const m = await model(a);
    const s = sn();
    await add(a.admin, { model: m.descriptor, sn: s, reason: 'r' });
    // the change is pruned before this copy saw it
    await gw.db.sql`update blacklist_log set pruned_through = (select max(seq) from blacklist_changes)`;
    await gw.db.sql`delete from blacklist_changes where sn = ${s}`;
    await index.catchUp();
    expect(index.lookup(s)?.model).toBe(m.descriptor);
    expect(index.size).toBe((await gw.db.sql<{ n: number }[]>`select count(*)::int as n from blacklist_entries`)[0].n);
  });
});
