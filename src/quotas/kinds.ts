import type { ActorKind } from '../actors/store.js';
import { quotaRequestMachine } from '../../machines/quotaRequest.js';
import { organizationLeaveMachine } from '../../machines/organizationLeave.js';

/**
 * The lifecycles of the quotas domain and the columns their snapshots project onto their own rows.
 * The actor store writes these columns in the transaction of every create and send; nothing else does.
 */
export const requestKind: ActorKind<typeof quotaRequestMachine> = {
  type: 'quotaRequest',
  machine: quotaRequestMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'quota_requests',
    columns: ['status', 'decided_at', 'decided_by', 'decision_reason'],
    project: ({ context }, state) => ({
      status: state, decided_at: context.decidedAt, decided_by: context.decidedBy, decision_reason: context.decisionReason,
    }),
  },
};

/** A membership is `leaving` while its account has a leave whose `finished_at` is null (derived in repo.ts). */
export const leaveKind: ActorKind<typeof organizationLeaveMachine> = {
  type: 'organizationLeave',
  machine: organizationLeaveMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'organization_leaves',
    columns: ['state', 'finished_at'],
    project: ({ context }, state) => ({ state, finished_at: context.finishedAt }),
  },
};
