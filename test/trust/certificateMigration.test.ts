import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { deviceCertificateMachine } from '../../machines/deviceCertificate.js';
import { accessCodeMachine } from '../../machines/accessCode.js';
import { migrationTestbed, restoreSnapshot as restore } from '../helpers/migrations.js';

/**
 * 1600-1603 (issue 33): certificates and access codes issued before get their actors in the state
 * their rows show; claim groups get their settings columns; a license row's decision may wait
 * for its actor's projection.
 */
const db = migrationTestbed();

const AT = '2026-11-23T10:00:00.000Z';

describe('migrations 1600-1603', () => {
  it('backfills certificate and access code actors, claim group settings; decisions may be projected', async () => {
    await db.upTo((f) => f < '1600');
    const account = crypto.randomUUID();
    const [live, revokedThing] = [crypto.randomUUID(), crypto.randomUUID()];
    await db.sql`insert into accounts (id, name) values (${account}, 'legacy')`;
    await db.sql`insert into things (id, account_id, manufacturer, model, serial) values (${live}, ${account}, 'Acme', 'm', 'S1')`;
    await db.sql`insert into things (id, account_id, manufacturer, model, serial, revoked_at) values (${revokedThing}, ${account}, 'Acme', 'm', 'S2', '2026-11-20T10:00:00Z')`;
    const cert = (serial: string, thing: string, created: string, extra: { revoked?: boolean; awaiting?: boolean } = {}) => db.sql`
      insert into device_certificates (serial, thing_id, pem, not_after, created_at, revoked, revoked_at, awaiting_first_use)
      values (${serial}, ${thing}, 'pem', '2027-11-01T10:00:00Z', ${created}, ${extra.revoked ?? false},
        ${extra.revoked ? '2026-11-10T10:00:00.250Z' : null}, ${extra.awaiting ?? false})`;
    await cert('0a01', live, '2026-11-01T10:00:00Z', { revoked: true });
    await cert('0a02', live, '2026-11-05T10:00:00Z');
    await cert('0a03', live, '2026-11-09T10:00:00Z', { awaiting: true });
    await cert('0b01', revokedThing, '2026-11-01T10:00:00Z', { revoked: true });
    const group = crypto.randomUUID();
    await db.sql`insert into claim_groups (id, account_id, secret_hash) values (${group}, ${account}, ${crypto.randomBytes(32)})`;
    await db.sql`insert into actors (type, id, state, snapshot) values ('claimGroup', ${group}, 'active',
      ${db.sql.json({ value: 'active', context: { name: 'line 4', maxDevices: 12, ttlDays: 3 } })})`;
    const [unused, used] = [crypto.randomBytes(32), crypto.randomBytes(32)];
    await db.sql`insert into thing_access_codes (code_hash, thing_id, issued_by_account, expires_at) values (${unused}, ${live}, ${account}, '2026-11-30T10:00:00Z')`;
    await db.sql`insert into thing_access_codes (code_hash, thing_id, issued_by_account, expires_at, used_at, used_by_account)
      values (${used}, ${live}, ${account}, '2026-11-30T10:00:00Z', '2026-11-21T10:00:00Z', ${account})`;

    expect(await db.upTo((f) => f >= '1600' && f < '1610')).toEqual([
      '1600_device_certificate_actors.sql', '1601_claim_group_settings.sql', '1602_access_code_actors.sql', '1603_license_decision_projected.sql',
    ]);

    const actors = new Map((await db.sql<{ type: string; id: string; state: string; snapshot: unknown }[]>`
      select type, id, state, snapshot from actors where type in ('deviceCertificate', 'accessCode')`).map((a) => [a.id, a]));
    expect(Object.fromEntries(['0a01', '0a02', '0a03', '0b01'].map((s) => [s, actors.get(s)?.state]))).toEqual({
      '0a01': 'superseded', '0a02': 'inUse', '0a03': 'issued', '0b01': 'revoked',
    });
    const superseded = restore(deviceCertificateMachine, actors.get('0a01')!.snapshot);
    expect(superseded.context).toEqual({ serial: '0a01', thingId: live, issuedAt: '2026-11-01T10:00:00.000Z', notAfter: '2027-11-01T10:00:00.000Z', renewal: false, revokedAt: '2026-11-10T10:00:00.250Z' });
    expect(superseded.can({ type: 'REVOKE', at: AT })).toBe(false);
    const inUse = restore(deviceCertificateMachine, actors.get('0a02')!.snapshot);
    expect(inUse.context.renewal).toBe(true);
    expect(inUse.can({ type: 'AUTHENTICATE', at: AT })).toBe(true);
    const awaiting = restore(deviceCertificateMachine, actors.get('0a03')!.snapshot);
    expect(awaiting.can({ type: 'FIRST_USE', at: AT })).toBe(true);

    const [group1] = await db.sql`select name, max_devices, ttl_days from claim_groups where id = ${group}`;
    expect(group1).toEqual({ name: 'line 4', max_devices: 12, ttl_days: 3 });

    const codes = await db.sql<{ id: string; code_hash: Buffer }[]>`select id, code_hash from thing_access_codes`;
    const idOf = (hash: Buffer) => codes.find((c) => c.code_hash.equals(hash))!.id;
    const open = restore(accessCodeMachine, actors.get(idOf(unused))!.snapshot);
    expect(actors.get(idOf(unused))!.state).toBe('issued');
    expect(open.can({ type: 'USE', at: AT, accountId: account })).toBe(true);
    expect(open.can({ type: 'USE', at: '2026-11-30T10:00:00.000Z', accountId: account })).toBe(false);
    const done = restore(accessCodeMachine, actors.get(idOf(used))!.snapshot);
    expect(actors.get(idOf(used))!.state).toBe('used');
    expect(done.context).toMatchObject({ usedAt: '2026-11-21T10:00:00.000Z', usedByAccount: account });
    expect(done.can({ type: 'USE', at: AT, accountId: account })).toBe(false);

    // a license row may now be inserted before its actor projects the decision
    await db.sql`insert into device_licenses (id, thing_id, kind, features) values (${crypto.randomUUID()}, ${live}, 'request', '[]')`;
  });
});
