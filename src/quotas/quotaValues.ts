import type { Sql } from '../db/client.js';
import type { QuotaGate } from '../gateway.js';
import { isUuid } from '../http/auth/principal.js';
import { notFound } from '../lib/errors.js';
import { repo, type DefaultRow } from './repo.js';
import { presentQuota, type QuotaView } from './views.js';

/** Quota values: the platform defaults, an account's or organization's records, and the gate other domains ask (rules 1, 7). */
export class QuotaValues implements QuotaGate {
  constructor(private readonly sql: Sql) {}

  async defaults(): Promise<DefaultRow[]> {
    return (await repo.defaults(this.sql)).map((d) => ({ ...d }));
  }

  /** QuotaGate: the applied value for an account (its organization's when a member: rule 7). */
  async limit(accountId: string, serviceCode: string, quotaCode: string): Promise<number | null> {
    const d = await repo.defaultOf(this.sql, serviceCode, quotaCode);
    if (!d) throw notFound(`unknown quota ${serviceCode}/${quotaCode}`);
    if (!isUuid(accountId)) return d.default_value;
    const m = await repo.membership(this.sql, accountId);
    if (m) {
      const q = await repo.quotaValue(this.sql, { organizationId: m.organization_id }, serviceCode, quotaCode);
      return q ? q.applied_value : d.default_value;
    }
    let q = await repo.quotaValue(this.sql, { accountId }, serviceCode, quotaCode);
    if (!q) {
      if (!(await repo.accountExists(this.sql, accountId))) return d.default_value;
      await repo.seedAccount(this.sql, accountId);
      q = await repo.quotaValue(this.sql, { accountId }, serviceCode, quotaCode);
    }
    return q ? q.applied_value : d.default_value;
  }

  /** The quotas an account works with: its organization's (rule 7) or its own, seeded on first access (rule 1). */
  async accountQuotas(accountId: string): Promise<{ scope: 'account' | 'organization'; account_id: string; organization_id: string | null; items: QuotaView[] }> {
    const m = await repo.membership(this.sql, accountId);
    if (m) {
      return { scope: 'organization', account_id: accountId, organization_id: m.organization_id, items: (await repo.orgQuotas(this.sql, m.organization_id)).map(presentQuota) };
    }
    let rows = await repo.accountQuotas(this.sql, accountId);
    if (rows.length === 0) {
      await repo.seedAccount(this.sql, accountId);
      rows = await repo.accountQuotas(this.sql, accountId);
    }
    return { scope: 'account', account_id: accountId, organization_id: null, items: rows.map(presentQuota) };
  }

  async organizationQuotas(organizationId: string): Promise<QuotaView[]> {
    return (await repo.orgQuotas(this.sql, organizationId)).map(presentQuota);
  }

  /** One organization quota, by record id or by quota_code. */
  async organizationQuota(organizationId: string, quotaId: string): Promise<QuotaView> {
    const q = (await repo.orgQuotas(this.sql, organizationId)).find((r) => r.id === quotaId.toLowerCase() || r.quota_code === quotaId);
    if (!q) throw notFound(`quota ${quotaId} not found in organization ${organizationId}`);
    return presentQuota(q);
  }
}
