import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimGroupMachine } from '../../machines/claimGroup.js';
import { Cluster, DomainBus } from '../../src/actors/cluster.js';
import { ActorStore, type ActorKind, type StoredEvent } from '../../src/actors/store.js';
import { DomainError } from '../../src/lib/errors.js';
import { factoryRegistrationKind } from '../../src/registry/kinds.js';
import { claimGroupKind } from '../../src/trust/kinds.js';
import { createLogger } from '../../src/log.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

const claimGroup: ActorKind<typeof claimGroupMachine> = { type: 'claimGroup', machine: claimGroupMachine, accountOf: (c) => c.accountId };
const log = createLogger('silent', false);

let db: TestDatabase;
let nodeA: { cluster: Cluster; bus: DomainBus; store: ActorStore };
let nodeB: { cluster: Cluster; bus: DomainBus; store: ActorStore };

async function node(name: string) {
  const cluster = new Cluster(db.sql, name, log);
  await cluster.start();
  const bus = new DomainBus();
  return { cluster, bus, store: new ActorStore(db.sql, cluster, bus) };
}

beforeAll(async () => {
  db = await createTestDatabase();
  nodeA = await node('a');
  nodeB = await node('b');
});
afterAll(async () => {
  await nodeA.cluster.stop();
  await nodeB.cluster.stop();
  await db.drop();
});

const now = () => new Date().toISOString();
const newGroup = (maxDevices: number, ttlDays = 1) => {
  const id = crypto.randomUUID();
  return nodeA.store.create(claimGroup, id, { id, accountId: crypto.randomUUID(), name: 'line 1', maxDevices, ttlDays, createdAt: now() }).then((r) => ({ id, ...r }));
};

describe('actor store', () => {
  it('creates an actor, stores its snapshot and its entry event', async () => {
    const g = await newGroup(3);
    expect(g.state).toBe('active');
    expect(g.version).toBe(1);
    expect(g.events.map((e) => e.type)).toEqual(['claimGroup.created']);
    const stored = await nodeA.store.get(claimGroup, g.id);
    expect(stored?.snapshot.context.consumed).toBe(0);
    await expect(nodeA.store.create(claimGroup, g.id, { id: g.id, accountId: crypto.randomUUID(), name: 'x', maxDevices: 1, ttlDays: 1, createdAt: now() }))
      .rejects.toMatchObject({ kind: 'conflict' });
  });

  it('50 concurrent events at one actor: each applied once or refused, no lost update', async () => {
    const g = await newGroup(30);
    const thingIds = Array.from({ length: 50 }, () => crypto.randomUUID());
    const results = await Promise.allSettled(thingIds.map((thingId) => nodeA.store.send(claimGroup, g.id, { type: 'CLAIM', at: now(), thingId })));
    const ok = results.filter((r) => r.status === 'fulfilled');
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(ok).toHaveLength(30);
    expect(refused).toHaveLength(20);
    for (const r of refused) {
      expect(r.reason).toBeInstanceOf(DomainError);
      expect(r.reason.kind).toBe('conflict');
    }
    const stored = await nodeA.store.get(claimGroup, g.id);
    expect(stored?.snapshot.context.consumed).toBe(30);
    expect(stored?.state).toBe('capped');
    expect(stored?.version).toBe(31);
    const events = await db.sql<{ type: string; payload: { thingId?: string } }[]>`
      select type, payload from domain_events where actor_id = ${g.id} order by seq`;
    const claimed = events.filter((e) => e.type === 'claimGroup.claimed');
    expect(claimed).toHaveLength(30);
    expect(new Set(claimed.map((e) => e.payload.thingId)).size).toBe(30);
    expect(events.filter((e) => e.type === 'claimGroup.capped')).toHaveLength(1);
  });

  it('refuses with 409 an event the machine does not accept in its state', async () => {
    const g = await newGroup(1);
    await nodeA.store.send(claimGroup, g.id, { type: 'REVOKE', at: now() });
    const err = await nodeA.store.send(claimGroup, g.id, { type: 'CLAIM', at: now(), thingId: 'x' }).catch((e) => e);
    expect(err).toBeInstanceOf(DomainError);
    expect(err.kind).toBe('conflict');
    expect(err.detail).toMatch(/revoked.*CLAIM/);
    expect((await nodeA.store.get(claimGroup, g.id))?.version).toBe(2);
  });

  it('404 for an unknown actor', async () => {
    await expect(nodeA.store.send(claimGroup, crypto.randomUUID(), { type: 'REVOKE', at: now() })).rejects.toMatchObject({ kind: 'not_found' });
  });

  it('writes nothing when the surrounding work fails (one transaction)', async () => {
    const g = await newGroup(5);
    await expect(nodeA.store.run(async (uow) => {
      await uow.send(claimGroup, g.id, { type: 'CLAIM', at: now(), thingId: 'a' });
      throw new Error('domain write failed');
    })).rejects.toThrow('domain write failed');
    const stored = await nodeA.store.get(claimGroup, g.id);
    expect(stored?.snapshot.context.consumed).toBe(0);
    const [{ count }] = await db.sql<{ count: number }[]>`select count(*)::int as count from domain_events where actor_id = ${g.id} and type = 'claimGroup.claimed'`;
    expect(count).toBe(0);
  });

  it('publishes events after commit on this node and, through NOTIFY, on the other node', async () => {
    const seenA: StoredEvent[] = [];
    const seenB: StoredEvent[] = [];
    nodeA.bus.on('claimGroup.revoked', (e: StoredEvent) => seenA.push(e));
    nodeB.bus.on('claimGroup.revoked', (e: StoredEvent) => seenB.push(e));
    const g = await newGroup(1);
    await nodeA.store.send(claimGroup, g.id, { type: 'REVOKE', at: now(), by: 'alice' });
    expect(seenA.map((e) => e.actorId)).toContain(g.id);
    await expect.poll(() => seenB.map((e) => e.actorId), { timeout: 5000 }).toContain(g.id);
    const ev = seenB.find((e) => e.actorId === g.id)!;
    expect(ev.payload.by).toBe('alice');
    expect(seenA.filter((e) => e.actorId === g.id)).toHaveLength(1);
  });

  it('births actors with their rows: each row inserted with the given columns and the initial projection; a taken key is skipped', async () => {
    const [a, b] = [crypto.randomUUID(), crypto.randomUUID()];
    for (const id of [a, b]) await db.sql`insert into accounts (id, name) values (${id}, 'birth')`;
    const at = '2026-11-27T10:00:00.000Z';
    const birth = (accountId: string, note: string) => ({ id: accountId, input: { accountId, requestedAt: at, requestedBy: 'alice', note }, row: {} });
    const born = await nodeA.store.run((uow) => uow.createWithRows(factoryRegistrationKind, [birth(a, 'first'), birth(b, 'second')], ['account_id']));
    expect([...born.keys()]).toEqual([a, b]);
    expect(born.get(a)).toMatchObject({ state: 'REQUESTED', version: 1, events: [{ type: 'factoryRegistration.requested', actorId: a }] });
    const rows = await db.sql`select account_id, state, note, requested_at, requested_by from factory_registrations where account_id in ${db.sql([a, b])} order by note`;
    expect(rows).toEqual([
      { account_id: a, state: 'REQUESTED', note: 'first', requested_at: new Date(at), requested_by: 'alice' },
      { account_id: b, state: 'REQUESTED', note: 'second', requested_at: new Date(at), requested_by: 'alice' },
    ]);
    // the key is taken: no row, no actor, no event; a key free in the same batch is born
    const c = crypto.randomUUID();
    await db.sql`insert into accounts (id, name) values (${c}, 'birth')`;
    const again = await nodeA.store.run((uow) => uow.createWithRows(factoryRegistrationKind, [birth(a, 'again'), birth(c, 'third')], ['account_id']));
    expect([...again.keys()]).toEqual([c]);
    expect((await nodeA.store.get(factoryRegistrationKind, a))?.snapshot.context.note).toBe('first');
    const [{ n }] = await db.sql<{ n: number }[]>`select count(*)::int as n from domain_events where actor_id = ${a}`;
    expect(n).toBe(1);
    // without onConflict a taken key fails the unit of work
    await expect(nodeA.store.run((uow) => uow.createWithRows(factoryRegistrationKind, [birth(a, 'again')]))).rejects.toMatchObject({ code: '23505' });
    // a kind without a projection has no row to be born with
    await expect(nodeA.store.run((uow) => uow.createWithRows(claimGroup, [{ id: a, input: { id: a, accountId: a, name: 'x', maxDevices: 1, ttlDays: 1, createdAt: now() }, row: {} }])))
      .rejects.toMatchObject({ kind: 'internal' });
  });

  it('sends to several actors at once: each machine decides, the accepted ones are written together (snapshot, projection, events)', async () => {
    const accountId = crypto.randomUUID();
    await db.sql`insert into accounts (id, name) values (${accountId}, 'many')`;
    const ids = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()].sort();
    await nodeA.store.run(async (uow) => {
      for (const [i, id] of ids.entries()) {
        await db.sql`insert into claim_groups (id, account_id, secret_hash) values (${id}, ${accountId}, ${crypto.randomBytes(32)})`;
        // the last one has no room: its machine refuses CLAIM_MANY
        await uow.create(claimGroupKind, id, { id, accountId, name: `g${i}`, maxDevices: i === 2 ? 0 : 2, ttlDays: 1, createdAt: now() });
      }
    });
    const thingIds = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
    const results = await nodeA.store.run(async (uow) => {
      const loaded = await uow.loadMany(claimGroupKind, [...ids, crypto.randomUUID()]);
      expect([...loaded.keys()]).toEqual(ids);
      const { decisions, written } = uow.trySendMany(claimGroupKind, ids.map((id) => ({ id, event: { type: 'CLAIM_MANY' as const, at: now(), thingIds }, loaded: loaded.get(id)! })));
      expect(decisions.map((d) => d.refused ? 'refused' : d.emitted.map((e) => e.type))).toEqual([['claimGroup.claimedMany', 'claimGroup.capped'], ['claimGroup.claimedMany', 'claimGroup.capped'], 'refused']);
      return written;
    });
    expect(results.map((r) => ('refused' in r ? r.state : [r.state, r.version, r.events.length]))).toEqual([['capped', 2, 2], ['capped', 2, 2], 'capped']);
    const rows = await db.sql`select id, state, consumed from claim_groups where id in ${db.sql(ids)} order by id`;
    expect(rows).toEqual([{ id: ids[0], state: 'capped', consumed: 2 }, { id: ids[1], state: 'capped', consumed: 2 }, { id: ids[2], state: 'capped', consumed: 0 }]);
    expect((await nodeA.store.get(claimGroupKind, ids[1]))?.snapshot.context.consumed).toBe(2);
    const [{ n }] = await db.sql<{ n: number }[]>`select count(*)::int as n from domain_events where actor_id in ${db.sql(ids)} and type = 'claimGroup.claimedMany'`;
    expect(n).toBe(2);
  });

  it('deletes an actor (its events stay); false when there is none', async () => {
    const g = await newGroup(1);
    expect(await nodeA.store.run((uow) => uow.delete(claimGroup, g.id))).toBe(true);
    expect(await nodeA.store.get(claimGroup, g.id)).toBeUndefined();
    expect(await nodeA.store.run((uow) => uow.delete(claimGroup, g.id))).toBe(false);
    const [{ n }] = await db.sql<{ n: number }[]>`select count(*)::int as n from domain_events where actor_id = ${g.id}`;
    expect(n).toBe(1);
  });

  it('does not publish events of a rolled-back transaction to other nodes', async () => {
    const seenB: string[] = [];
    nodeB.bus.on('claimGroup.revoked', (e: StoredEvent) => seenB.push(e.actorId));
    const g = await newGroup(1);
    await nodeA.store.run(async (uow) => {
      await uow.send(claimGroup, g.id, { type: 'REVOKE', at: now() });
      throw new Error('abort');
    }).catch(() => {});
    const marker = await newGroup(1);
    await nodeA.store.send(claimGroup, marker.id, { type: 'REVOKE', at: now() });
    await expect.poll(() => seenB, { timeout: 5000 }).toContain(marker.id);
    expect(seenB).not.toContain(g.id);
  });
});
