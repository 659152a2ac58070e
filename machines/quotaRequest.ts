import { setup, assign, emit } from 'xstate';

/**
 * Quota increase request: pending -> approved | denied (reason required) | cancelled.
 * `kind` says which quota record an approval raises: the requesting account's standalone record
 * (`account`, and `leave` for requests auto-submitted because the account leaves an organization,
 * tagged with `leaveRequestAccountId`) or the organization's record (`organization`).
 * Time comes in events (`at`); the machine holds no clock and does no I/O.
 */
export type QuotaRequestKind = 'account' | 'organization' | 'leave';

export interface QuotaRequestContext {
  id: string;
  kind: QuotaRequestKind;
  /** the requesting account (for leave requests: the leaving account) */
  accountId: string;
  organizationId: string | null;
  leaveRequestAccountId: string | null;
  leaveId: string | null;
  serviceCode: string;
  quotaCode: string;
  desiredValue: number;
  reason: string | null;
  createdAt: string;
  createdBy: string;
  decidedAt: string | null;
  decidedBy: string | null;
  decisionReason: string | null;
}

export type QuotaRequestInput = Omit<QuotaRequestContext, 'decidedAt' | 'decidedBy' | 'decisionReason'>;

export type QuotaRequestEvent =
  | { type: 'APPROVE'; at: string; by: string }
  | { type: 'DENY'; at: string; by: string; reason: string }
  | { type: 'CANCEL'; at: string; by: string; why?: string };

type Decided = {
  type: 'quotaRequest.decided';
  requestId: string;
  decision: 'approved' | 'denied';
  serviceCode: string;
  quotaCode: string;
  desiredValue: number;
  reason?: string;
  accountId?: string;
  organizationId?: string;
  leaveRequestAccountId?: string;
};

const decided = (context: QuotaRequestContext, decision: 'approved' | 'denied'): Decided => ({
  type: 'quotaRequest.decided',
  requestId: context.id,
  decision,
  serviceCode: context.serviceCode,
  quotaCode: context.quotaCode,
  desiredValue: context.desiredValue,
  ...(decision === 'denied' && context.decisionReason ? { reason: context.decisionReason } : {}),
  accountId: context.accountId,
  ...(context.organizationId ? { organizationId: context.organizationId } : {}),
  ...(context.leaveRequestAccountId ? { leaveRequestAccountId: context.leaveRequestAccountId } : {}),
});

export const quotaRequestMachine = setup({
  types: {
    context: {} as QuotaRequestContext,
    input: {} as QuotaRequestInput,
    events: {} as QuotaRequestEvent,
    emitted: {} as
      | { type: 'quotaRequest.submitted'; requestId: string; kind: QuotaRequestKind; serviceCode: string; quotaCode: string; desiredValue: number; accountId: string; organizationId?: string; leaveRequestAccountId?: string }
      | Decided
      | { type: 'quotaRequest.cancelled'; requestId: string; by: string; why?: string; accountId: string; organizationId?: string },
  },
  guards: {
    hasReason: ({ event }) => event.type === 'DENY' && typeof event.reason === 'string' && event.reason.trim().length > 0,
  },
}).createMachine({
  id: 'quotaRequest',
  context: ({ input }) => ({ ...input, decidedAt: null, decidedBy: null, decisionReason: null }),
  initial: 'pending',
  entry: emit(({ context }) => ({
    type: 'quotaRequest.submitted' as const,
    requestId: context.id,
    kind: context.kind,
    serviceCode: context.serviceCode,
    quotaCode: context.quotaCode,
    desiredValue: context.desiredValue,
    accountId: context.accountId,
    ...(context.organizationId ? { organizationId: context.organizationId } : {}),
    ...(context.leaveRequestAccountId ? { leaveRequestAccountId: context.leaveRequestAccountId } : {}),
  })),
  states: {
    pending: {
      on: {
        APPROVE: {
          target: 'approved',
          actions: assign({ decidedAt: ({ event }) => event.at, decidedBy: ({ event }) => event.by }),
        },
        DENY: {
          guard: 'hasReason',
          target: 'denied',
          actions: assign({ decidedAt: ({ event }) => event.at, decidedBy: ({ event }) => event.by, decisionReason: ({ event }) => event.reason.trim() }),
        },
        CANCEL: {
          target: 'cancelled',
          actions: [
            assign({ decidedAt: ({ event }) => event.at, decidedBy: ({ event }) => event.by, decisionReason: ({ event }) => event.why ?? null }),
            emit(({ context, event }) => ({
              type: 'quotaRequest.cancelled' as const, requestId: context.id, by: event.by, accountId: context.accountId,
              ...(event.why ? { why: event.why } : {}),
              ...(context.organizationId ? { organizationId: context.organizationId } : {}),
            })),
          ],
        },
      },
    },
    approved: { type: 'final', entry: emit(({ context }) => decided(context, 'approved')) },
    denied: { type: 'final', entry: emit(({ context }) => decided(context, 'denied')) },
    cancelled: { type: 'final' },
  },
});
