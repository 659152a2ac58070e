import crypto from 'node:crypto';
import type { UnitOfWork } from '../actors/store.js';
import type { QuotaRequestInput } from '../../machines/quotaRequest.js';
import { requestKind } from './kinds.js';
import { repo, type RequestRow } from './repo.js';

/** The quota request actor's plumbing, shared by increase requests, organizations and the leave saga. */

/** What opening a request takes: the machine's input, with the id optional and the time as `at`. */
export type NewRequest = Omit<QuotaRequestInput, 'id' | 'createdAt'> & {
  /** given when the caller needs the id before the request exists (the leave saga) */
  id?: string;
  at: string;
};

/** Opens a pending request: its row first (the store projects the lifecycle onto it), then its actor. */
export async function openRequest(uow: UnitOfWork, r: NewRequest): Promise<string> {
  const id = r.id ?? crypto.randomUUID();
  await repo.insertRequest(uow.sql, {
    id, kind: r.kind, account_id: r.accountId, organization_id: r.organizationId, leave_request_account_id: r.leaveRequestAccountId,
    leave_id: r.leaveId, service_code: r.serviceCode, quota_code: r.quotaCode, desired_value: r.desiredValue, reason: r.reason,
    created_by: r.createdBy, created_at: r.at,
  });
  await uow.create(requestKind, id, {
    id, kind: r.kind, accountId: r.accountId, organizationId: r.organizationId, leaveRequestAccountId: r.leaveRequestAccountId, leaveId: r.leaveId,
    serviceCode: r.serviceCode, quotaCode: r.quotaCode, desiredValue: r.desiredValue, reason: r.reason, createdAt: r.at, createdBy: r.createdBy,
  });
  return id;
}

/** Cancels the given requests; the machine refuses those decided meanwhile, which stay as they are. */
export async function cancelPending(uow: UnitOfWork, rows: RequestRow[], by: string, why: string, at: string): Promise<void> {
  for (const r of rows) await uow.trySend(requestKind, r.id, { type: 'CANCEL', at, by, why });
}
