import type { IncreaseRequests } from './increaseRequests.js';
import type { LeaveSaga } from './leaveSaga.js';
import type { Organizations } from './organizations.js';
import type { QuotaValues } from './quotaValues.js';

/** The parts of the quotas domain, each a concern of its own (composed in index.ts). */
export interface Quotas {
  values: QuotaValues;
  organizations: Organizations;
  requests: IncreaseRequests;
  leaves: LeaveSaga;
}
