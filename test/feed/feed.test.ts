import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/lib/clock.js';
import { thingKind } from '../../src/trust/kinds.js';
import { expectProblem, startTestGateway, type HttpResponse, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { bornThings, createModel, registerFactoryService, signed, step, type FeedItem, approvedRegistrar } from './helpers.js';

/**
 * The state-change feed over real HTTP and Postgres: the item shape, paging, the THM-501xx
 * codes, who sees what (account, registrar), the full sync after an expired cursor, and changes
 * that commit out of order. Time (cursor age, signatures) comes from the gateway's ManualClock.
 */
const clock = new ManualClock();
let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
});
afterAll(async () => {
  await gw?.close();
});

const FEED = '/provisioning/v1/state-changes';

/** Reads the feed from `since` to its current end as `token`; every page's body. */
async function readAll(token: string, since?: string, limit = 100): Promise<{ items: FeedItem[]; cursor: string; pages: number }> {
  const items: FeedItem[] = [];
  let cursor = since;
  let pages = 0;
  for (;;) {
    const res: HttpResponse = await gw.http.get(`${FEED}?limit=${limit}${cursor ? `&since=${cursor}` : ''}`, { token });
    expect(res.status, res.text).toBe(200);
    pages++;
    items.push(...res.body.items);
    cursor = res.body.next_cursor;
    if (!res.body.has_more) return { items, cursor: cursor!, pages };
  }
}

/**
 * Reads from `since` until at least `n` changes are there. A change is served once every write
 * transaction older than it has ended, on the whole Postgres server: on the server the test run
 * shares, another test's open transaction may hold a fresh change back for a while.
 */
async function readAtLeast(token: string, n: number, since?: string, limit = 100) {
  return waitFor(async () => {
    const r = await readAll(token, since, limit);
    return r.items.length >= n ? r : undefined;
  }, 30_000, `${n} changes in the feed`);
}

describe('the feed (GET /provisioning/v1/state-changes)', () => {
  it('items carry thing id, model, serial, old and new state, event, time and sequence; a birth has no old state', async () => {
    const a = await createAccount(gw);
    const device = await enrollDevice(gw, a);
    const annihilated = await gw.http.post(`/api/v1/things/${device.thingId}/annihilate`, undefined, { token: a.admin });
    expect(annihilated.status, annihilated.text).toBe(200);

    const { items } = await readAtLeast(a.viewer, 2);
    expect(items).toHaveLength(2);
    const [birth, end] = items;
    expect(birth).toMatchObject({ thing_id: device.thingId, manufacturer: 'Acme', model: 'sensor-1', old_state: null, new_state: 'ROLLEDOFF', event: 'ENROLL' });
    expect(birth.serial).toMatch(/^SN-/);
    expect(end).toMatchObject({ thing_id: device.thingId, old_state: 'ROLLEDOFF', new_state: 'ANNIHILATED', event: 'ANNIHILATE' });
    expect(end.sequence).toBeGreaterThan(birth.sequence);
    expect(Date.parse(end.changed_at as string)).not.toBeNaN();
    const log = await gw.db.sql<{ seq: number }[]>`select seq from thing_state_changes where thing_id = ${device.thingId} order by seq`;
    expect(items.map((i) => i.sequence)).toEqual(log.map((r) => r.seq));
  });

  it('pages by next_cursor with has_more; an empty page still gives a cursor, which later picks up new changes', async () => {
    const a = await createAccount(gw);
    const model = await createModel(gw, a);
    const ids = await bornThings(gw, a.id, 5, { modelId: model });
    await step(gw, ids.slice(0, 2), 'PROVISION');
    await readAtLeast(a.operator, 7);

    const pages: HttpResponse[] = [];
    let cursor: string | undefined;
    do {
      const res: HttpResponse = await gw.http.get(`${FEED}?limit=3${cursor ? `&since=${cursor}` : ''}`, { token: a.operator });
      pages.push(res);
      cursor = res.body.next_cursor;
    } while (pages[pages.length - 1].body.has_more);
    expect(pages.map((p) => p.body.items.length)).toEqual([3, 3, 1]);
    expect(pages.map((p) => p.body.has_more)).toEqual([true, true, false]);
    const items = pages.flatMap((p) => p.body.items as FeedItem[]);
    expect(items.filter((i) => i.new_state === 'PROVISIONED').map((i) => i.thing_id).sort()).toEqual(ids.slice(0, 2).sort());
    expect(items.every((i) => i.model_id === model)).toBe(true);

    const empty = await gw.http.get(`${FEED}?since=${cursor}`, { token: a.operator });
    expect(empty.body).toMatchObject({ items: [], has_more: false });
    expect(empty.body.next_cursor).toEqual(expect.any(String));
    await step(gw, ids.slice(2, 3), 'PROVISION');
    const later = await readAtLeast(a.operator, 1, empty.body.next_cursor);
    expect(later.items.map((i) => [i.thing_id, i.new_state])).toEqual([[ids[2], 'PROVISIONED']]);
  });

  it('page bounds: limit 1 to 500 (default 100); other values and unknown parameters are 400', async () => {
    const a = await createAccount(gw);
    await bornThings(gw, a.id, 120, { perTx: 120 });
    await readAtLeast(a.viewer, 120);
    expect((await gw.http.get(FEED, { token: a.viewer })).body.items).toHaveLength(100);
    expect((await gw.http.get(`${FEED}?limit=500`, { token: a.viewer })).body.items).toHaveLength(120);
    for (const q of ['limit=0', 'limit=501', 'limit=x', 'colour=red']) {
      const p = expectProblem(await gw.http.get(`${FEED}?${q}`, { token: a.viewer }), 400);
      expect(p.code).toBeUndefined();
    }
  });

  it('each account sees its own changes only; users with any role and factory services of the account read it', async () => {
    const [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
    const [mine] = await bornThings(gw, a.id, 1);
    const [theirs] = await bornThings(gw, b.id, 1);
    await readAtLeast(a.viewer, 1);
    await readAtLeast(b.viewer, 1);
    for (const token of [a.admin, a.operator, a.viewer]) {
      expect((await readAll(token)).items.map((i) => i.thing_id)).toEqual([mine]);
    }
    expect((await readAll(b.viewer)).items.map((i) => i.thing_id)).toEqual([theirs]);
    const service = await registerFactoryService(gw, a);
    const res = await signed(gw, clock, service.creds, 'GET', FEED);
    expect(res.status, res.text).toBe(200);
    expect(res.body.items.map((i: FeedItem) => i.thing_id)).toEqual([mine]);
    expectProblem(await gw.http.get(FEED), 401);
  });

  it("a registrar-bound factory service reads the changes of the things of its registrar's models only", async () => {
    const a = await createAccount(gw);
    const registrar = await approvedRegistrar(gw, a);
    const bound = await registerFactoryService(gw, a, { registrarId: registrar });
    const otherModel = await createModel(gw, a);
    const [served] = await bornThings(gw, a.id, 1, { modelId: bound.modelId });
    const [notServed] = await bornThings(gw, a.id, 1, { modelId: otherModel });
    await readAtLeast(a.viewer, 2);
    const res = await signed(gw, clock, bound.creds, 'GET', FEED);
    expect(res.status, res.text).toBe(200);
    expect(res.body.items.map((i: FeedItem) => i.thing_id)).toEqual([served]);
    // the account's users see both
    expect((await readAll(a.viewer)).items.map((i) => i.thing_id)).toEqual([served, notServed]);
    // a cursor is bound to who it was issued to: the registrar's cursor means nothing to the account's users
    const p = expectProblem(await gw.http.get(`${FEED}?since=${res.body.next_cursor}`, { token: a.viewer }), 400);
    expect(p.code).toBe('THM-50110');
  });
});

describe('THM codes of the feed', () => {
  let a: TestAccount;
  beforeAll(async () => {
    a = await createAccount(gw);
    await bornThings(gw, a.id, 2);
  });

  it('THM-50100 (400): registrar_id sent, by a signed request or a user', async () => {
    const service = await registerFactoryService(gw, a, { registrarId: await approvedRegistrar(gw, a) });
    const viaSigned = expectProblem(await signed(gw, clock, service.creds, 'GET', `${FEED}?registrar_id=${crypto.randomUUID()}`), 400);
    expect(viaSigned).toMatchObject({ code: 'THM-50100' });
    expect(viaSigned.detail).toMatch(/registrar_id must not be sent.*signed identity/);
    for (const q of ['registrar_id=x', 'registrar_id=', `registrar_id=${'r'.repeat(600)}`, 'registrar_id=x&limit=0']) {
      expect(expectProblem(await gw.http.get(`${FEED}?${q}`, { token: a.viewer }), 400).code).toBe('THM-50100');
    }
  });

  it('THM-50110 (400): a malformed, truncated, altered or foreign cursor', async () => {
    const { cursor } = await readAll(a.viewer);
    const other = await createAccount(gw);
    const altered = cursor.slice(0, 10) + (cursor[10] === 'A' ? 'B' : 'A') + cursor.slice(11);
    const cases = ['not a cursor!', 'AAAA', cursor.slice(0, -4), altered, `${cursor}AA`, 'x'.repeat(600)];
    for (const since of cases) {
      const p = expectProblem(await gw.http.get(`${FEED}?since=${encodeURIComponent(since)}`, { token: a.viewer }), 400);
      expect(p.code, since).toBe('THM-50110');
      expect(p.detail).toMatch(/next_cursor|cursor/);
    }
    expect(expectProblem(await gw.http.get(`${FEED}?since=${cursor}`, { token: other.viewer }), 400).code).toBe('THM-50110');
  });

  it('THM-50120 (410) for a cursor older than 72 hours; the full sync lists the things and its feed_cursor resumes the feed with nothing lost', async () => {
    const b = await createAccount(gw);
    const model = await createModel(gw, b);
    const ids = await bornThings(gw, b.id, 7, { modelId: model });
    const { cursor } = await readAtLeast(b.viewer, 7);

    clock.advance(72 * 3600_000 - 60_000);
    expect((await gw.http.get(`${FEED}?since=${cursor}`, { token: b.viewer })).status).toBe(200);
    clock.advance(61_000);
    const p = expectProblem(await gw.http.get(`${FEED}?since=${cursor}`, { token: b.viewer }), 410);
    expect(p).toMatchObject({ code: 'THM-50120', full_sync: '/provisioning/v1/things' });
    expect(p.detail).toMatch(/more than 72 hours ago.*GET \/provisioning\/v1\/things/);

    // meanwhile the things moved on; the sync sees where they are now
    await step(gw, ids.slice(0, 3), 'PROVISION');
    const synced: { thing_id: string; state: string; model_id: string; serial: string }[] = [];
    let after: string | null = null;
    let feedCursor: string | null = null;
    do {
      const page: HttpResponse = await gw.http.get(`/provisioning/v1/things?limit=3${after ? `&after=${after}` : ''}`, { token: b.viewer });
      expect(page.status, page.text).toBe(200);
      if (!after) feedCursor = page.body.feed_cursor;
      else expect(page.body.feed_cursor).toBeNull();
      synced.push(...page.body.items);
      after = page.body.next_cursor;
      // a change during the sync: it must show in the feed after the sync's cursor
      if (synced.length === 3) await step(gw, [ids[6]], 'PROVISION');
    } while (after);
    expect(synced.map((t) => t.thing_id).sort()).toEqual([...ids].sort());
    expect(synced.filter((t) => t.state === 'PROVISIONED').length).toBeGreaterThanOrEqual(3);
    expect(synced[0]).toMatchObject({ model_id: model, serial: expect.stringMatching(/^SN-/) });

    // the change made during the sync is there; anything else is a change the sync already saw
    // (the cursor is the horizon when the sync began: at least once, never a gap)
    const resumed = await waitFor(async () => {
      const r = await readAll(b.viewer, feedCursor!);
      return r.items.some((i) => i.thing_id === ids[6] && i.new_state === 'PROVISIONED') ? r : undefined;
    }, 30_000, 'the change made during the sync');
    expect(resumed.items.at(-1)).toMatchObject({ thing_id: ids[6], new_state: 'PROVISIONED' });
    expect(resumed.items.every((i) => ids.includes(i.thing_id))).toBe(true);
  });
});

describe('changes that commit out of order', () => {
  /** A unit of work that writes its thing row (taking its transaction id) and waits before its change. */
  function heldWriter(accountId: string) {
    const id = crypto.randomUUID();
    let writeChange!: () => void;
    let changeWritten!: () => void;
    let commit!: () => void;
    const mayWrite = new Promise<void>((r) => (writeChange = r));
    const written = new Promise<void>((r) => (changeWritten = r));
    const mayCommit = new Promise<void>((r) => (commit = r));
    let started!: () => void;
    const began = new Promise<void>((r) => (started = r));
    const done = gw.gw.actors.run(async (uow) => {
      await uow.sql`insert into things (id, account_id, manufacturer, model, serial) values (${id}, ${accountId}, 'Acme', 'late', ${id})`;
      started();
      await mayWrite;
      await uow.create(thingKind, id, { id, accountId, manufacturer: 'Acme', model: 'late', serial: id, enrolledBy: 'test', enrolledAt: clock.now().toISOString() });
      changeWritten();
      await mayCommit;
    });
    return { id, began, writeChange, written, commit, done };
  }

  it('a change whose sequence is older than one already served is still served, once (xid horizon)', async () => {
    const a = await createAccount(gw);
    const start = (await readAll(a.viewer)).cursor;
    // first takes its transaction id, second takes the lower sequence; first commits first
    const first = heldWriter(a.id);
    await first.began;
    const second = heldWriter(a.id);
    await second.began;
    second.writeChange();
    await second.written;
    first.writeChange();
    await first.written;
    first.commit();
    await first.done;
    // first is served while second is still open; a seq-ordered cursor would now be past second's change
    const before = await readAtLeast(a.viewer, 1, start);
    expect(before.items.map((i) => i.thing_id)).toEqual([first.id]);

    second.commit();
    await second.done;
    const afterCommit = await readAtLeast(a.viewer, 1, before.cursor);
    expect(afterCommit.items.map((i) => i.thing_id)).toEqual([second.id]);
    // second's sequence is the lower one: a cursor on sequence alone would have passed it for good
    expect(afterCommit.items[0].sequence).toBeLessThan(before.items[0].sequence);
    // read again from the start: both, once each
    expect((await readAll(a.viewer, start)).items.map((i) => i.thing_id).sort()).toEqual([first.id, second.id].sort());
  });

  it('while a writer holds its transaction open, later commits wait behind it rather than pass it', async () => {
    const a = await createAccount(gw);
    const late = heldWriter(a.id);
    await late.began;
    late.writeChange();
    await late.written;
    const others = await bornThings(gw, a.id, 5, { perTx: 1 });
    const held = await readAll(a.viewer);
    expect(held.items).toEqual([]);
    late.commit();
    await late.done;
    const all = await readAtLeast(a.viewer, 6, held.cursor);
    expect(all.items.map((i) => i.thing_id)).toEqual([late.id, ...others]);
  });
});

describe('the /provisioning/v1 edge', () => {
  it("publishes the things group's lifecycle routes beside the feed, subscriptions and full sync; registration and revocation stay internal", async () => {
    const a = await createAccount(gw);
    const device = await enrollDevice(gw, a);
    const internal = await gw.http.get(`/api/v1/things/${device.thingId}/state`, { token: a.viewer });
    const edge = await gw.http.get(`/provisioning/v1/things/${device.thingId}/state`, { token: a.viewer });
    expect(edge.status, edge.text).toBe(200);
    expect(edge.body).toEqual(internal.body);
    const [{ serial }] = await gw.db.sql<{ serial: string }[]>`select serial from things where id = ${device.thingId}`;
    const resolved = await gw.http.get(`/provisioning/v1/things/resolve?model=sensor-1&serial=${serial}`, { token: a.viewer });
    expect(resolved.status, resolved.text).toBe(200);
    expect(JSON.stringify(resolved.body)).toContain(device.thingId);
    // same access rules: a viewer may not annihilate there either
    expect(expectProblem(await gw.http.post(`/provisioning/v1/things/${device.thingId}/annihilate`, undefined, { token: a.viewer }), 403).detail).toMatch(/factory:Thing:Annihilate/);
    expect((await gw.http.post(`/provisioning/v1/things/${device.thingId}/annihilate`, undefined, { token: a.admin })).status).toBe(200);
    expect((await readAtLeast(a.viewer, 2)).items.map((i) => i.new_state)).toEqual(['ROLLEDOFF', 'ANNIHILATED']);
    expectProblem(await gw.http.delete(`/provisioning/v1/things/${device.thingId}`, { token: a.admin }), 404);
    expectProblem(await gw.http.post('/provisioning/v1/things/claim-groups', { name: 'x', maxDevices: 1, ttlDays: 1 }, { token: a.admin }), 404);

    const doc = (await gw.http.get('/docs/json')).body as { paths: Record<string, unknown> };
    for (const p of ['/provisioning/v1/state-changes', '/provisioning/v1/things', '/provisioning/v1/state-change-subscriptions', '/provisioning/v1/state-change-subscriptions/{id}', '/provisioning/v1/things/{thingId}/state', '/provisioning/v1/things/{thingId}/annihilate']) {
      expect(doc.paths, p).toHaveProperty([p]);
    }
  });
});
