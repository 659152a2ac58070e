import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';

const code = z.string().trim().min(1).max(100).regex(/^[a-z0-9][a-z0-9-]*$/, 'lower-case letters, digits and dashes');

export const defaultSchema = z.object({
  service_code: z.string(), quota_code: z.string(), name: z.string(),
  default_value: z.number().int(), max_value: z.number().int().nullable(), adjustable: z.boolean(),
});

export const quotaSchema = z.object({
  id: z.uuid(), service_code: z.string(), quota_code: z.string(), name: z.string(),
  default_value: z.number().int(), applied_value: z.number().int(), max_value: z.number().int().nullable(), adjustable: z.boolean(),
  scope: z.enum(['account', 'organization']), account_id: z.uuid().nullable(), organization_id: z.uuid().nullable(), updated_at: z.string(),
});

export const accountQuotasSchema = z.object({
  scope: z.enum(['account', 'organization']).describe('organization: the account is a member and uses the organization\'s quotas (rule 7)'),
  account_id: z.uuid(), organization_id: z.uuid().nullable(), items: z.array(quotaSchema),
});

export const requestSchema = z.object({
  id: z.uuid(),
  kind: z.enum(['account', 'organization', 'leave']),
  status: z.enum(['pending', 'approved', 'denied', 'cancelled']),
  account_id: z.uuid().describe('the requesting account (the leaving account for leave-gated requests)'),
  organization_id: z.uuid().nullable(),
  leave_request_account_id: z.uuid().nullable().describe('set when auto-submitted because this account is leaving an organization'),
  leave_gated: z.boolean(),
  leave_id: z.uuid().nullable(),
  service_code: z.string(), quota_code: z.string(), desired_value: z.number().int(),
  reason: z.string().nullable(), decision_reason: z.string().nullable(), decided_by: z.string().nullable(), decided_at: z.string().nullable(),
  created_by: z.string().nullable(), created_at: z.string(),
});

export const submitRequestBody = z.strictObject({
  service_code: code.default('organizations'),
  quota_code: code,
  desired_value: z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
  reason: z.string().trim().min(1).max(2000).optional(),
});

export const denyBody = z.strictObject({ reason: z.string().trim().min(1, 'a reason is required to deny a request').max(2000) });

export const pageQuery = z.strictObject({
  page: z.coerce.number().int().min(0).max(100_000).default(0),
  size: z.coerce.number().int().min(1).max(100).default(20),
});

export const pageOf = <T extends z.ZodType>(item: T) => z.object({ items: z.array(item), page: z.number().int(), size: z.number().int(), total: z.number().int() });

export const organizationSchema = z.object({
  id: z.uuid(), name: z.string(), management_account_id: z.uuid(), member_count: z.number().int(), created_at: z.string(),
});

export const memberSchema = z.object({
  account_id: z.uuid(), organization_id: z.uuid(), status: z.enum(['active', 'leaving']), management: z.boolean(),
  leave_id: z.uuid().nullable(), joined_at: z.string(),
});

export const leaveSchema = z.object({
  id: z.uuid(), organization_id: z.uuid(), account_id: z.uuid(),
  state: z.string().describe('started | seeding | awaitingDecisions | departing | departed | blocking | blocked'),
  outcome: z.enum(['pending', 'departed', 'blocked']),
  initiated_as: z.enum(['leave', 'remove']),
  elevated: z.array(z.object({ service_code: z.string(), quota_code: z.string(), value: z.number().int() })),
  request_ids: z.array(z.uuid()),
  decisions: z.record(z.string(), z.enum(['approved', 'denied'])),
  started_at: z.string(), finished_at: z.string().nullable(),
});

export const createOrganizationBody = z.strictObject({ name: z.string().trim().min(1).max(200) });
export const addMemberBody = z.strictObject({ account_id: z.uuid() });
export const orgParams = z.object({ orgId: z.uuid() });

// --- OpenAPI components (issue 39): the resources above by name, with examples
const E = EXAMPLE;
named(defaultSchema, 'QuotaDefault', { example: { service_code: 'things', quota_code: 'things-per-account', name: 'Things per account', default_value: 10000, max_value: 1000000, adjustable: true } });
named(quotaSchema, 'Quota', { example: { id: E.otherId, service_code: 'things', quota_code: 'things-per-account', name: 'Things per account', default_value: 10000, applied_value: 20000, max_value: 1000000, adjustable: true, scope: 'account', account_id: E.accountId, organization_id: null, updated_at: E.at } });
named(accountQuotasSchema, 'AccountQuotas');
named(requestSchema, 'QuotaRequest', { example: { id: E.otherId, kind: 'account', status: 'pending', account_id: E.accountId, organization_id: null, leave_request_account_id: null, leave_gated: false, leave_id: null, service_code: 'things', quota_code: 'things-per-account', desired_value: 50000, reason: 'second factory line', decision_reason: null, decided_by: null, decided_at: null, created_by: 'admin@acme', created_at: E.at } });
named(submitRequestBody, 'QuotaRequestCreate', { example: { service_code: 'things', quota_code: 'things-per-account', desired_value: 50000, reason: 'second factory line' } });
named(organizationSchema, 'Organization', { example: { id: E.otherId, name: 'Acme group', management_account_id: E.accountId, member_count: 3, created_at: E.at } });
named(memberSchema, 'OrganizationMember', { example: { account_id: E.accountId, organization_id: E.otherId, status: 'active', management: true, leave_id: null, joined_at: E.at } });
named(leaveSchema, 'OrganizationLeave');
