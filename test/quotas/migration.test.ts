import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { repo } from '../../src/quotas/repo.js';
import { migrationTestbed } from '../helpers/migrations.js';

/** 0501 moves the leave status off organization_members onto organization_leaves: existing data carries over. */
const db = migrationTestbed();

describe('migration 0501_quota_projections', () => {
  it('backfills organization_leaves from the leave actors; an unfinished leave still shows', async () => {
    await db.upTo((f) => f < '0501');
    const [mgmt, leaving, departed] = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
    const org = crypto.randomUUID();
    const [open, done] = [crypto.randomUUID(), crypto.randomUUID()];
    for (const id of [mgmt, leaving, departed]) await db.sql`insert into accounts (id, name) values (${id}, ${id})`;
    await db.sql`insert into organizations (id, name, management_account_id) values (${org}, 'legacy', ${mgmt})`;
    await db.sql`insert into organization_members (account_id, organization_id) values (${mgmt}, ${org})`;
    await db.sql`insert into organization_members (account_id, organization_id, status, leave_id) values (${leaving}, ${org}, 'leaving', ${open})`;
    const snapshot = (id: string, accountId: string, finishedAt: string | null) =>
      db.sql.json({ context: { id, organizationId: org, accountId, startedAt: '2026-11-01T10:00:00.000Z', finishedAt } } as never);
    await db.sql`insert into actors (type, id, state, snapshot) values
      ('organizationLeave', ${open}, 'awaitingDecisions', ${snapshot(open, leaving, null)}),
      ('organizationLeave', ${done}, 'departed', ${snapshot(done, departed, '2026-11-02T10:00:00.000Z')})`;

    expect(await db.upTo((f) => f.startsWith('0501'))).toEqual(['0501_quota_projections.sql']);
    const leaves = await db.sql`select id, account_id, state, started_at, finished_at from organization_leaves order by started_at, finished_at nulls first`;
    expect(leaves.map((l) => [l.id, l.account_id, l.state, l.finished_at?.toISOString() ?? null])).toEqual([
      [open, leaving, 'awaitingDecisions', null],
      [done, departed, 'departed', '2026-11-02T10:00:00.000Z'],
    ]);
    expect(await repo.membership(db.sql, leaving)).toMatchObject({ status: 'leaving', leave_id: open, organization_id: org });
    expect(await repo.membership(db.sql, mgmt)).toMatchObject({ status: 'active', leave_id: null });
    const columns = await db.sql`select column_name from information_schema.columns where table_name = 'organization_members'`;
    expect(columns.map((c) => c.column_name).sort()).toEqual(['account_id', 'joined_at', 'organization_id']);
    const [req] = await db.sql`select column_default from information_schema.columns where table_name = 'quota_requests' and column_name = 'status'`;
    expect(req.column_default).toMatch(/pending/);
  });
});
