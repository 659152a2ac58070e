import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { migrationTestbed } from '../helpers/migrations.js';
import { thingMachine } from '../../machines/thing.js';

// 0601 backfills things.lifecycle_state / lifecycle_updated_at from the thing actors of a database
// that ran the earlier migrations (their snapshots have no `stateAt` yet: the enrollment time counts).

const THIS = '0601_thing_lifecycle.sql';
const db = migrationTestbed();
beforeAll(async () => {
  await db.upTo((f) => f < THIS);
});

describe('migration 0601', () => {
  it('projects existing things\' lifecycle state; the log view reads the state changes', async () => {
    const accountId = crypto.randomUUID();
    await db.sql`insert into accounts (id, name) values (${accountId}, 'old')`;
    const enrolledAt = '2026-11-01T10:00:00.000Z';
    const [registered, enrolled] = [crypto.randomUUID(), crypto.randomUUID()];
    for (const [id, input] of [
      [registered, {}],
      [enrolled, { enrolledBy: 'claim_token', enrolledAt }],
    ] as const) {
      await db.sql`insert into things (id, account_id, manufacturer, model, serial) values (${id}, ${accountId}, 'Acme', 'm', ${id})`;
      const snapshot = createActor(thingMachine, { input: { id, accountId, manufacturer: 'Acme', model: 'm', serial: id, ...input } }).start().getPersistedSnapshot() as any;
      delete snapshot.context.stateAt; // as the earlier machine stored it
      await db.sql`insert into actors (type, id, state, snapshot) values ('thing', ${id}, ${snapshot.value}, ${db.sql.json(snapshot)})`;
    }
    await db.sql`insert into domain_events (actor_type, actor_id, type, account_id, payload)
      values ('thing', ${enrolled}, 'thing.stateChanged', ${accountId}, ${db.sql.json({ thingId: enrolled, from: 'ROLLEDOFF', to: 'PROVISIONED', at: enrolledAt })})`;

    expect((await db.upTo(() => true))[0]).toBe(THIS);

    const rows = await db.sql<{ id: string; lifecycle_state: string; lifecycle_updated_at: Date | null }[]>`
      select id, lifecycle_state, lifecycle_updated_at from things where account_id = ${accountId}`;
    expect(Object.fromEntries(rows.map((r) => [r.id, [r.lifecycle_state, r.lifecycle_updated_at?.toISOString() ?? null]]))).toEqual({
      [registered]: ['REGISTERED', null],
      [enrolled]: ['ROLLEDOFF', enrolledAt],
    });
    // an event written before 0601 had no `event` field: the view shows null there
    expect(await db.sql`select thing_id, account_id, from_state, to_state, event, at from thing_state_changes where thing_id = ${enrolled}`).toEqual([
      { thing_id: enrolled, account_id: accountId, from_state: 'ROLLEDOFF', to_state: 'PROVISIONED', event: null, at: new Date(enrolledAt) },
    ]);
  });
});
