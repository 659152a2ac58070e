import type { Db } from '../db/client.js';

/** SQL of the quotas domain. Every function takes the pool or a transaction: the service decides. */

export interface DefaultRow {
  service_code: string;
  quota_code: string;
  name: string;
  default_value: number;
  max_value: number | null;
  adjustable: boolean;
}

export interface QuotaRow extends DefaultRow {
  id: string;
  account_id: string | null;
  organization_id: string | null;
  applied_value: number;
  updated_at: Date;
}

export interface OrganizationRow {
  id: string;
  name: string;
  management_account_id: string;
  created_by: string | null;
  created_at: Date;
}

export interface MemberRow {
  account_id: string;
  organization_id: string;
  status: 'active' | 'leaving';
  leave_id: string | null;
  joined_at: Date;
}

export interface RequestRow {
  id: string;
  kind: 'account' | 'organization' | 'leave';
  account_id: string;
  organization_id: string | null;
  leave_request_account_id: string | null;
  leave_id: string | null;
  service_code: string;
  quota_code: string;
  desired_value: number;
  reason: string | null;
  status: 'pending' | 'approved' | 'denied' | 'cancelled';
  decision_reason: string | null;
  decided_by: string | null;
  decided_at: Date | null;
  created_by: string | null;
  created_at: Date;
}

/** Membership with the status derived from the account's unfinished leave (at most one: unique index). */
const membersWithStatus = (db: Db) => db`m.account_id, m.organization_id, m.joined_at,
  case when l.id is null then 'active' else 'leaving' end as status, l.id as leave_id
  from organization_members m left join organization_leaves l on l.account_id = m.account_id and l.finished_at is null`;

const quotaCols = (db: Db) => db`q.id, q.account_id, q.organization_id, q.service_code, q.quota_code, d.name, q.default_value,
  q.applied_value, q.max_value, q.adjustable, q.updated_at`;

export const repo = {
  async defaults(db: Db): Promise<DefaultRow[]> {
    return db<DefaultRow[]>`select service_code, quota_code, name, default_value, max_value, adjustable from quota_defaults order by position`;
  },
  async defaultOf(db: Db, serviceCode: string, quotaCode: string): Promise<DefaultRow | undefined> {
    const [row] = await db<DefaultRow[]>`
      select service_code, quota_code, name, default_value, max_value, adjustable from quota_defaults
      where service_code = ${serviceCode} and quota_code = ${quotaCode}`;
    return row;
  },

  /** Rule 1 / rule 4: standalone records seeded with the platform defaults (existing ones kept). */
  async seedAccount(db: Db, accountId: string): Promise<void> {
    await db`
      insert into quotas (account_id, service_code, quota_code, default_value, applied_value, max_value, adjustable)
      select ${accountId}, service_code, quota_code, default_value, default_value, max_value, adjustable from quota_defaults
      on conflict (account_id, service_code, quota_code) where account_id is not null do nothing`;
  },
  async accountQuotas(db: Db, accountId: string): Promise<QuotaRow[]> {
    return db<QuotaRow[]>`select ${quotaCols(db)} from quotas q join quota_defaults d using (service_code, quota_code)
      where q.account_id = ${accountId} order by d.position`;
  },
  async deleteAccountQuotas(db: Db, accountId: string): Promise<number> {
    return (await db`delete from quotas where account_id = ${accountId}`).count;
  },
  async orgQuotas(db: Db, organizationId: string): Promise<QuotaRow[]> {
    return db<QuotaRow[]>`select ${quotaCols(db)} from quotas q join quota_defaults d using (service_code, quota_code)
      where q.organization_id = ${organizationId} order by d.position`;
  },
  /** Rule 2: the organization's records: the greater of the default and the given values. */
  async seedOrganization(db: Db, organizationId: string, values: Map<string, number>): Promise<void> {
    for (const d of await repo.defaults(db)) {
      const applied = Math.max(d.default_value, values.get(`${d.service_code}/${d.quota_code}`) ?? d.default_value);
      await db`
        insert into quotas (organization_id, service_code, quota_code, default_value, applied_value, max_value, adjustable)
        values (${organizationId}, ${d.service_code}, ${d.quota_code}, ${d.default_value}, ${applied}, ${d.max_value}, ${d.adjustable})`;
    }
  },
  async quotaValue(db: Db, owner: { accountId: string } | { organizationId: string }, serviceCode: string, quotaCode: string): Promise<QuotaRow | undefined> {
    const where = 'accountId' in owner ? db`q.account_id = ${owner.accountId}` : db`q.organization_id = ${owner.organizationId}`;
    const [row] = await db<QuotaRow[]>`select ${quotaCols(db)} from quotas q join quota_defaults d using (service_code, quota_code)
      where ${where} and q.service_code = ${serviceCode} and q.quota_code = ${quotaCode}`;
    return row;
  },
  /** Raises (never lowers) an applied value; returns false when the record does not exist. */
  async raise(db: Db, owner: { accountId: string } | { organizationId: string }, serviceCode: string, quotaCode: string, value: number): Promise<boolean> {
    const where = 'accountId' in owner ? db`account_id = ${owner.accountId}` : db`organization_id = ${owner.organizationId}`;
    const r = await db`update quotas set applied_value = greatest(applied_value, ${value}), updated_at = now()
      where ${where} and service_code = ${serviceCode} and quota_code = ${quotaCode}`;
    return r.count === 1;
  },

  /**
   * Locks the account row: every membership change of one account serializes on it. Through iam's
   * read model account_directory (migration 1702), a simple view: the lock reaches the account's row.
   */
  async lockAccount(db: Db, accountId: string): Promise<boolean> {
    const [row] = await db`select id from account_directory where id = ${accountId} for update`;
    return !!row;
  },
  async accountExists(db: Db, accountId: string): Promise<boolean> {
    const [row] = await db`select 1 from account_directory where id = ${accountId}`;
    return !!row;
  },
  /** The account's membership; `leaving` (with its leave) while a leave of the account is unfinished. */
  async membership(db: Db, accountId: string): Promise<MemberRow | undefined> {
    const [row] = await db<MemberRow[]>`select ${membersWithStatus(db)} where m.account_id = ${accountId}`;
    return row;
  },
  async members(db: Db, organizationId: string): Promise<MemberRow[]> {
    return db<MemberRow[]>`select ${membersWithStatus(db)} where m.organization_id = ${organizationId} order by m.joined_at, m.account_id`;
  },
  async memberCount(db: Db, organizationId: string): Promise<number> {
    const [row] = await db<{ n: number }[]>`select count(*)::int as n from organization_members where organization_id = ${organizationId}`;
    return row.n;
  },
  async addMember(db: Db, organizationId: string, accountId: string): Promise<void> {
    await db`insert into organization_members (account_id, organization_id) values (${accountId}, ${organizationId})`;
  },
  async removeMember(db: Db, accountId: string, organizationId: string): Promise<number> {
    return (await db`delete from organization_members where account_id = ${accountId} and organization_id = ${organizationId}`).count;
  },

  async createOrganization(db: Db, o: { id: string; name: string; managementAccountId: string; createdBy: string }): Promise<OrganizationRow> {
    const [row] = await db<OrganizationRow[]>`
      insert into organizations (id, name, management_account_id, created_by)
      values (${o.id}, ${o.name}, ${o.managementAccountId}, ${o.createdBy}) returning *`;
    return row;
  },
  async organization(db: Db, id: string, lock = false): Promise<OrganizationRow | undefined> {
    const [row] = lock
      ? await db<OrganizationRow[]>`select * from organizations where id = ${id} for update`
      : await db<OrganizationRow[]>`select * from organizations where id = ${id}`;
    return row;
  },

  /** The request's row; its lifecycle columns start at their defaults and are the actor's projection. */
  async insertRequest(db: Db, r: Omit<RequestRow, 'status' | 'decision_reason' | 'decided_by' | 'decided_at' | 'created_at'> & { created_at: string }): Promise<void> {
    await db`insert into quota_requests (id, kind, account_id, organization_id, leave_request_account_id, leave_id, service_code, quota_code,
        desired_value, reason, created_by, created_at)
      values (${r.id}, ${r.kind}, ${r.account_id}, ${r.organization_id}, ${r.leave_request_account_id}, ${r.leave_id}, ${r.service_code},
        ${r.quota_code}, ${r.desired_value}, ${r.reason}, ${r.created_by}, ${r.created_at})`;
  },
  async request(db: Db, id: string): Promise<RequestRow | undefined> {
    const [row] = await db<RequestRow[]>`select * from quota_requests where id = ${id}`;
    return row;
  },
  async pendingFor(db: Db, where: { accountId: string; kind: 'account' } | { organizationId: string; kind: 'organization' }, serviceCode?: string, quotaCode?: string): Promise<RequestRow[]> {
    const owner = 'accountId' in where ? db`account_id = ${where.accountId}` : db`organization_id = ${where.organizationId}`;
    const quota = serviceCode ? db`and service_code = ${serviceCode} and quota_code = ${quotaCode ?? ''}` : db``;
    return db<RequestRow[]>`select * from quota_requests where ${owner} and kind = ${where.kind} and status = 'pending' ${quota} order by created_at`;
  },
  async pendingOfLeave(db: Db, leaveId: string): Promise<RequestRow[]> {
    return db<RequestRow[]>`select * from quota_requests where leave_id = ${leaveId} and status = 'pending' order by created_at, id`;
  },
  async listRequests(db: Db, where: { accountId: string } | { organizationId: string } | { pending: true }, page: number, size: number): Promise<{ items: RequestRow[]; total: number }> {
    const cond = 'accountId' in where
      ? db`account_id = ${where.accountId}`
      : 'organizationId' in where ? db`organization_id = ${where.organizationId}` : db`status = 'pending'`;
    const items = await db<RequestRow[]>`select * from quota_requests where ${cond} order by created_at, id limit ${size} offset ${page * size}`;
    const [{ n }] = await db<{ n: number }[]>`select count(*)::int as n from quota_requests where ${cond}`;
    return { items, total: n };
  },
  /** The leave's row (before its actor is created); `state` and `finished_at` are the actor's projection. */
  async insertLeave(db: Db, l: { id: string; organizationId: string; accountId: string; startedAt: string }): Promise<void> {
    await db`insert into organization_leaves (id, organization_id, account_id, started_at)
      values (${l.id}, ${l.organizationId}, ${l.accountId}, ${l.startedAt})`;
  },
  /** Leaves whose state is a step still to do (start-up and periodic sweep). */
  async leavesWithStepDue(db: Db, states: string[]): Promise<{ id: string; state: string }[]> {
    return db<{ id: string; state: string }[]>`select id, state from organization_leaves
      where finished_at is null and state in ${db(states)}`;
  },
};
