import crypto from 'node:crypto';
import fs from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { migrationTestbed } from '../helpers/migrations.js';
import { migrate } from '../../src/db/migrate.js';
import { claimGroupMachine } from '../../machines/claimGroup.js';
import { enrollmentTokenMachine } from '../../machines/enrollmentToken.js';

// 0103 backfills the claim_groups projection and the enrollment-token actors of a database that
// ran the earlier migrations and holds data.

const MIGRATIONS = 'src/db/migrations';
const THIS = '0103_trust_projections.sql';
const db = migrationTestbed();
beforeAll(async () => {
  await db.upTo((f) => f < THIS);
});

describe('migration 0103', () => {
  it('projects existing claim groups and gives existing enrollment tokens their actors', async () => {
    const accountId = crypto.randomUUID();
    await db.sql`insert into accounts (id, name) values (${accountId}, 'old')`;
    // a claim group as the earlier code stored it: two claims taken
    const groupId = crypto.randomUUID();
    const createdAt = '2026-11-01T10:00:00.000Z';
    const group = createActor(claimGroupMachine, { input: { id: groupId, accountId, name: 'old line', maxDevices: 5, ttlDays: 2, createdAt } }).start();
    group.send({ type: 'CLAIM_MANY', at: createdAt, thingIds: ['a', 'b'] });
    await db.sql`insert into claim_groups (id, account_id, secret_hash) values (${groupId}, ${accountId}, ${crypto.randomBytes(32)})`;
    await db.sql`insert into actors (type, id, state, snapshot) values ('claimGroup', ${groupId}, 'active', ${db.sql.json(group.getPersistedSnapshot() as never)})`;
    // two registered things: one token unused, one used
    const [unused, used] = [crypto.randomUUID(), crypto.randomUUID()];
    const expiresAt = '2026-11-02T10:00:00.123Z';
    for (const [id, usedAt] of [[unused, null], [used, '2026-11-01T12:00:00.000Z']] as const) {
      await db.sql`insert into things (id, account_id, manufacturer, model, serial, enrollment_token_hash, enrollment_token_expires_at, enrollment_token_used_at)
        values (${id}, ${accountId}, 'Acme', 'm', ${id}, ${crypto.randomBytes(32)}, ${expiresAt}, ${usedAt})`;
    }

    expect((await migrate(db.sql)).applied).toEqual([THIS, ...fs.readdirSync(MIGRATIONS).filter((f) => f.endsWith('.sql') && f > THIS).sort()]);

    expect(await db.sql`select state, consumed, expires_at from claim_groups where id = ${groupId}`)
      .toEqual([{ state: 'active', consumed: 2, expires_at: new Date('2026-11-03T10:00:00.000Z') }]);
    const tokens = await db.sql<{ id: string; state: string; snapshot: any }[]>`select id, state, snapshot from actors where type = 'enrollmentToken' order by state`;
    expect(tokens.map((t) => [t.id, t.state])).toEqual([[unused, 'issued'], [used, 'used']]);
    // the snapshots restore into the machine, which decides as it would for a token issued now
    const restore = (id: string) => createActor(enrollmentTokenMachine, { snapshot: tokens.find((t) => t.id === id)!.snapshot, input: undefined as never }).getSnapshot();
    const issued = restore(unused);
    expect(issued.context).toEqual({ thingId: unused, accountId, issuedAt: expect.any(String), expiresAt, usedAt: null });
    expect(issued.can({ type: 'USE', at: '2026-11-02T10:00:00.122Z' })).toBe(true);
    expect(issued.can({ type: 'USE', at: expiresAt })).toBe(false);
    expect(issued.can({ type: 'EXPIRE', at: expiresAt })).toBe(true);
    const done = restore(used);
    expect(done.status).toBe('done');
    expect(done.context.usedAt).toBe('2026-11-01T12:00:00.000Z');
    expect(done.can({ type: 'USE', at: createdAt })).toBe(false);
  });
});
