import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { migrationTestbed } from '../helpers/migrations.js';
import { START } from '../../src/feed/cursor.js';
import * as repo from '../../src/feed/repo.js';
import { waitFor } from '../helpers/wait.js';

// 0900 on a database with a state-change log already: the old changes are in the feed (with the
// migration's xid); an account's dispatch starts at the end of its log when its first
// subscription appears (no deliveries of old changes).

const THIS = '0900_feed.sql';
const db = migrationTestbed();
beforeAll(async () => {
  await db.upTo((f) => f < THIS);
});

describe('migration 0900', () => {
  it('keeps the existing log readable in order; a new subscription gets nothing old to deliver', async () => {
    const accountId = crypto.randomUUID();
    await db.sql`insert into accounts (id, name) values (${accountId}, 'old')`;
    const things = [crypto.randomUUID(), crypto.randomUUID()];
    for (const id of things) {
      await db.sql`
        insert into domain_events (actor_type, actor_id, type, account_id, payload)
        values ('thing', ${id}, 'thing.enrolled', ${accountId}, ${db.sql.json({ from: 'REGISTERED', to: 'ROLLEDOFF', event: 'ENROLL', at: '2026-11-01T10:00:00.000Z' })})`;
    }
    expect(await db.upTo((f) => f === THIS)).toEqual([THIS]);
    // the feed's SQL joins the read models trust and the factory publish (views of later migrations)
    await db.upTo((f) => f.startsWith('1700_') || f.startsWith('1703_'));

    // (served once no older write transaction of the shared server is open: the horizon)
    const rows = await waitFor(async () => {
      const page = await repo.changesPage(db.sql, { accountId, registrarId: null }, START, 10);
      return page.rows.length === things.length ? page.rows : undefined;
    }, 30_000, 'the old changes to be served');
    expect(rows.map((r) => r.thing_id)).toEqual(things);
    expect(new Set(rows.map((r) => r.xid)).size).toBe(1);
    expect(await repo.accountsToDispatch(db.sql, 10)).toEqual([]);

    const subscription = crypto.randomUUID();
    await db.sql.begin(async (tx) => {
      await tx`
        insert into state_change_subscriptions (id, account_id, target_url, secret_sealed, created_by, created_at, updated_at)
        values (${subscription}, ${accountId}, 'https://hooks.example.com', '\\x00', 'test', now(), now())`;
      await repo.startDispatchIfIdle(tx, accountId, subscription);
    });
    expect(await repo.accountsToDispatch(db.sql, 10)).toEqual([]);

    // a change after the subscription is after the account's dispatch cursor
    await db.sql`
      insert into domain_events (actor_type, actor_id, type, account_id, payload)
      values ('thing', ${crypto.randomUUID()}, 'thing.stateChanged', ${accountId}, ${db.sql.json({ from: 'ROLLEDOFF', to: 'ANNIHILATED', event: 'ANNIHILATE', at: '2026-11-02T10:00:00.000Z' })})`;
    // (once no older write transaction of the shared server is open: the horizon)
    const due = await waitFor(async () => {
      const accounts = await repo.accountsToDispatch(db.sql, 10);
      return accounts.length ? accounts : undefined;
    }, 30_000, 'the change to be dispatchable');
    expect(due).toEqual([accountId]);
  });
});
