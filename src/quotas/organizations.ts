import crypto from 'node:crypto';
import type { ActorStore } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import { isoNow, type Clock } from '../lib/clock.js';
import { iso } from '../lib/encoding.js';
import { conflict, notFound, refused } from '../lib/errors.js';
import { repo, type OrganizationRow } from './repo.js';
import { cancelPending } from './requests.js';
import { presentMember, type Caller, type MemberView, type OrganizationView } from './views.js';

export const ORGANIZATIONS = 'organizations';
export const MEMBER_QUOTA = 'member-accounts-per-organization';

export interface OrganizationsDeps {
  sql: Sql;
  actors: Pick<ActorStore, 'run'>;
  clock: Clock;
}

/** Who may read and manage an organization (the other parts of the domain ask this). */
export type OrganizationAccess = Pick<Organizations, 'readable' | 'manageable'>;

/** Organizations and their members: creation (rule 2), membership (rule 7), the member quota, access. */
export class Organizations {
  constructor(private readonly deps: OrganizationsDeps) {}

  /** Platform principals and members of the organization read it; anyone else gets 404. */
  async readable(organizationId: string, caller: Caller): Promise<OrganizationRow> {
    const org = await repo.organization(this.deps.sql, organizationId);
    if (org && caller.platform) return org;
    if (org && caller.accountId) {
      const m = await repo.membership(this.deps.sql, caller.accountId);
      if (m?.organization_id === organizationId) return org;
    }
    throw notFound(`organization ${organizationId} not found`);
  }

  /** Admins of the management account manage the organization (403 for other members). */
  async manageable(organizationId: string, caller: Caller): Promise<OrganizationRow> {
    const org = await this.readable(organizationId, caller);
    if (caller.accountId !== org.management_account_id || !caller.roles.includes('admin')) {
      throw refused(`only admins of the organization's management account ${org.management_account_id} manage organization ${organizationId}`);
    }
    return org;
  }

  async get(organizationId: string, caller: Caller): Promise<OrganizationView> {
    return this.present(await this.readable(organizationId, caller));
  }

  async of(accountId: string): Promise<OrganizationView & { membership: MemberView }> {
    const m = await repo.membership(this.deps.sql, accountId);
    if (!m) throw notFound(`account ${accountId} is standalone: it belongs to no organization`);
    const org = (await repo.organization(this.deps.sql, m.organization_id))!;
    return { ...(await this.present(org)), membership: presentMember(m, org) };
  }

  /** Rule 2: a standalone account creates an organization and becomes its management account. */
  async create(accountId: string, caller: Caller, name: string): Promise<OrganizationView> {
    const org = await this.deps.actors.run(async (uow) => {
      await repo.lockAccount(uow.sql, accountId);
      const m = await repo.membership(uow.sql, accountId);
      if (m) throw conflict(`account ${accountId} is already a member of organization ${m.organization_id}; only a standalone account creates an organization`, { extra: { organization_id: m.organization_id } });
      // the account's own pending requests target records that are about to go: cancelled first
      await cancelPending(uow, await repo.pendingFor(uow.sql, { accountId, kind: 'account' }), caller.sub, 'the account created an organization', isoNow(this.deps.clock));
      await repo.seedAccount(uow.sql, accountId);
      const values = new Map((await repo.accountQuotas(uow.sql, accountId)).map((q) => [`${q.service_code}/${q.quota_code}`, q.applied_value]));
      const created = await repo.createOrganization(uow.sql, { id: crypto.randomUUID(), name, managementAccountId: accountId, createdBy: caller.sub });
      await repo.seedOrganization(uow.sql, created.id, values);
      await repo.deleteAccountQuotas(uow.sql, accountId);
      await repo.addMember(uow.sql, created.id, accountId);
      await uow.emit('organization', created.id, { type: 'organization.created', organizationId: created.id, managementAccountId: accountId, name }, accountId);
      return created;
    });
    return this.present(org);
  }

  async members(organizationId: string, caller: Caller): Promise<MemberView[]> {
    const org = await this.readable(organizationId, caller);
    return (await repo.members(this.deps.sql, organizationId)).map((m) => presentMember(m, org));
  }

  /** Adds a standalone account; enforces member-accounts-per-organization (409 naming the quota). */
  async addMember(organizationId: string, accountId: string, caller: Caller): Promise<MemberView> {
    await this.manageable(organizationId, caller);
    return this.deps.actors.run(async (uow) => {
      const org = (await repo.organization(uow.sql, organizationId, true))!;
      if (!(await repo.lockAccount(uow.sql, accountId))) throw notFound(`account ${accountId} not found`);
      const m = await repo.membership(uow.sql, accountId);
      if (m) {
        throw conflict(m.organization_id === organizationId
          ? `account ${accountId} is already a member of this organization`
          : `account ${accountId} is a member of another organization; it must leave it first`);
      }
      const quota = await repo.quotaValue(uow.sql, { organizationId }, ORGANIZATIONS, MEMBER_QUOTA);
      const limit = quota?.applied_value ?? 10;
      const count = await repo.memberCount(uow.sql, organizationId);
      if (count >= limit) {
        throw conflict(`quota ${ORGANIZATIONS}/${MEMBER_QUOTA} reached: organization ${organizationId} has ${count} member accounts, the applied value is ${limit}; request an increase at /api/v1/organizations/${organizationId}/quota-requests`, {
          type: 'quota-exceeded', extra: { service_code: ORGANIZATIONS, quota_code: MEMBER_QUOTA, applied_value: limit, current: count },
        });
      }
      // rule 7: inside the organization the account uses the organization's quotas
      await cancelPending(uow, await repo.pendingFor(uow.sql, { accountId, kind: 'account' }), caller.sub, 'the account joined an organization', isoNow(this.deps.clock));
      await repo.deleteAccountQuotas(uow.sql, accountId);
      await repo.addMember(uow.sql, organizationId, accountId);
      await uow.emit('organization', organizationId, { type: 'organization.memberAdded', organizationId, accountId, by: caller.sub }, accountId);
      return presentMember((await repo.membership(uow.sql, accountId))!, org);
    });
  }

  private async present(o: OrganizationRow): Promise<OrganizationView> {
    return { id: o.id, name: o.name, management_account_id: o.management_account_id, member_count: await repo.memberCount(this.deps.sql, o.id), created_at: iso(o.created_at) };
  }
}
