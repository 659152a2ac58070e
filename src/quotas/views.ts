import { iso } from '../lib/encoding.js';
import type { QuotaRequestKind } from '../../machines/quotaRequest.js';
import type { OrganizationLeaveContext } from '../../machines/organizationLeave.js';
import type { MemberRow, OrganizationRow, QuotaRow, RequestRow } from './repo.js';

/** What the API shows of quotas, requests, organizations and leaves (snake_case, ISO timestamps). */

/** Who calls (built by the routes from the principal). */
export interface Caller {
  sub: string;
  accountId?: string;
  roles: string[];
  /** a `platform` realm principal with a platform role */
  platform: boolean;
}

export interface QuotaView {
  id: string;
  service_code: string;
  quota_code: string;
  name: string;
  default_value: number;
  applied_value: number;
  max_value: number | null;
  adjustable: boolean;
  scope: 'account' | 'organization';
  account_id: string | null;
  organization_id: string | null;
  updated_at: string;
}

export interface RequestView {
  id: string;
  kind: QuotaRequestKind;
  status: RequestRow['status'];
  account_id: string;
  organization_id: string | null;
  leave_request_account_id: string | null;
  leave_gated: boolean;
  leave_id: string | null;
  service_code: string;
  quota_code: string;
  desired_value: number;
  reason: string | null;
  decision_reason: string | null;
  decided_by: string | null;
  decided_at: string | null;
  created_by: string | null;
  created_at: string;
}

export interface OrganizationView {
  id: string;
  name: string;
  management_account_id: string;
  member_count: number;
  created_at: string;
}

export interface MemberView {
  account_id: string;
  organization_id: string;
  status: 'active' | 'leaving';
  management: boolean;
  leave_id: string | null;
  joined_at: string;
}

export interface LeaveView {
  id: string;
  organization_id: string;
  account_id: string;
  state: string;
  outcome: 'pending' | 'departed' | 'blocked';
  initiated_as: 'leave' | 'remove';
  elevated: { service_code: string; quota_code: string; value: number }[];
  request_ids: string[];
  decisions: Record<string, 'approved' | 'denied'>;
  started_at: string;
  finished_at: string | null;
}

export interface Page<T> { items: T[]; page: number; size: number; total: number }

export function presentQuota(q: QuotaRow): QuotaView {
  return {
    id: q.id, service_code: q.service_code, quota_code: q.quota_code, name: q.name, default_value: q.default_value,
    applied_value: q.applied_value, max_value: q.max_value, adjustable: q.adjustable,
    scope: q.organization_id ? 'organization' : 'account', account_id: q.account_id, organization_id: q.organization_id,
    updated_at: iso(q.updated_at),
  };
}

export function presentRequest(r: RequestRow): RequestView {
  return {
    id: r.id, kind: r.kind, status: r.status, account_id: r.account_id, organization_id: r.organization_id,
    leave_request_account_id: r.leave_request_account_id, leave_gated: r.leave_request_account_id !== null, leave_id: r.leave_id,
    service_code: r.service_code, quota_code: r.quota_code, desired_value: r.desired_value, reason: r.reason,
    decision_reason: r.decision_reason, decided_by: r.decided_by, decided_at: iso(r.decided_at), created_by: r.created_by,
    created_at: iso(r.created_at),
  };
}

export function presentMember(m: MemberRow, org: OrganizationRow): MemberView {
  return {
    account_id: m.account_id, organization_id: m.organization_id, status: m.status, management: m.account_id === org.management_account_id,
    leave_id: m.leave_id, joined_at: iso(m.joined_at),
  };
}

export function presentLeave(c: OrganizationLeaveContext, state: string): LeaveView {
  return {
    id: c.id, organization_id: c.organizationId, account_id: c.accountId, state,
    outcome: state === 'departed' ? 'departed' : state === 'blocked' ? 'blocked' : 'pending',
    initiated_as: c.initiatedAs,
    elevated: c.elevated.map((e) => ({ service_code: e.serviceCode, quota_code: e.quotaCode, value: e.value })),
    request_ids: c.requestIds, decisions: c.decisions, started_at: c.startedAt, finished_at: c.finishedAt,
  };
}
