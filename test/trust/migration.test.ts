import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { thingMachine } from '../../machines/thing.js';
import { licenseMachine } from '../../machines/license.js';
import { migrationTestbed, restoreSnapshot as restore } from '../helpers/migrations.js';

/** 0104 gives every thing and license row from before it an actor, in the state its row shows. */
const db = migrationTestbed();


describe('migration 0104_trust_actors', () => {
  it('creates the missing thing and license actors from their rows; existing actors are left alone', async () => {
    await db.upTo((f) => f < '0104');
    const account = crypto.randomUUID();
    const [registered, revoked, enrolled] = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
    const [pending, granted] = [crypto.randomUUID(), crypto.randomUUID()];
    await db.sql`insert into accounts (id, name) values (${account}, 'legacy')`;
    await db.sql`insert into things (id, account_id, manufacturer, model, serial, revoked_at) values
      (${registered}, ${account}, 'Acme', 'm', 'S1', null),
      (${revoked}, ${account}, 'Acme', 'm', 'S2', '2026-11-01T10:00:00.123Z')`;
    await db.sql`insert into things (id, account_id, manufacturer, model, serial, enrolled_by, enrolled_at) values
      (${enrolled}, ${account}, 'Acme', 'm', 'S3', 'claim_token', '2026-11-01T09:00:00Z')`;
    await db.sql`insert into actors (type, id, state, snapshot) values ('thing', ${enrolled}, 'PROVISIONED', '{"value": "PROVISIONED", "context": {}}')`;
    await db.sql`insert into device_licenses (id, thing_id, kind, decision, features, created_at) values
      (${pending}, ${enrolled}, 'request', 'pending', '["ota"]', '2026-11-02T10:00:00Z')`;
    await db.sql`insert into device_licenses (id, thing_id, kind, decision, features, created_at, decided_at, expires_at) values
      (${granted}, ${enrolled}, 'renew', 'granted', '[]', '2026-11-02T10:00:00Z', '2026-11-02T10:00:00Z', '2026-12-02T10:00:00Z')`;

    expect(await db.upTo((f) => f.startsWith('0104'))).toEqual(['0104_trust_actors.sql']);
    const actors = new Map((await db.sql<{ id: string; state: string; snapshot: unknown; version: number }[]>`
      select id, state, snapshot, version from actors`).map((a) => [a.id, a]));

    const reg = restore(thingMachine, actors.get(registered)!.snapshot);
    expect(actors.get(registered)!.state).toBe('REGISTERED');
    expect(reg.context).toEqual({ id: registered, accountId: account, manufacturer: 'Acme', model: 'm', serial: 'S1' });
    expect(reg.can({ type: 'ENROLL', at: '2026-11-23T10:00:00.000Z', method: 'enrollment_token' })).toBe(true);
    const rev = restore(thingMachine, actors.get(revoked)!.snapshot);
    expect(rev.context.revokedAt).toBe('2026-11-01T10:00:00.123Z');
    expect(rev.can({ type: 'REVOKE', at: '2026-11-23T10:00:00.000Z', serial: null, by: 'x' })).toBe(false);
    expect(actors.get(enrolled)!.state).toBe('PROVISIONED');

    const pend = restore(licenseMachine, actors.get(pending)!.snapshot);
    expect(pend.value).toBe('pending');
    expect(pend.context).toMatchObject({ thingId: enrolled, accountId: account, serial: 'S3', features: ['ota'], requestedAt: '2026-11-02T10:00:00.000Z' });
    expect(pend.can({ type: 'GRANT', at: '2026-11-23T10:00:00.000Z', by: 'op', thingRevoked: false })).toBe(true);
    const gr = restore(licenseMachine, actors.get(granted)!.snapshot);
    expect(gr.context).toMatchObject({ kind: 'renew', expiresAt: '2026-12-02T10:00:00.000Z' });
    expect(gr.can({ type: 'RENEW', at: '2026-12-01T10:00:00.000Z' })).toBe(true);
    expect(gr.can({ type: 'RENEW', at: '2026-12-03T10:00:00.000Z' })).toBe(false);
  });
});
