import { assign, emit, setup } from 'xstate';

/**
 * Reference request (spec document 2): a standing filter an eligible account asks of the owner
 * of a registrar. PENDING until the owner APPROVEs it (the initial reconcile runs; matching things
 * keep appearing while it is APPROVED) or REJECTs it with a reason (required). The requester or
 * the owner REVOKEs it (from PENDING or APPROVED), which stops it. Pure: time comes as `at`.
 */
export interface ReferenceRequestInput {
  id: string;
  requesterAccountId: string;
  ownerAccountId: string;
  registrarId: string;
  createdAt: string;
  createdBy: string;
}

export interface ReferenceRequestContext extends ReferenceRequestInput {
  decidedAt: string | null;
  decidedBy: string | null;
  reason: string | null;
  revokedAt: string | null;
  revokedBy: string | null;
}

export type ReferenceRequestEvent =
  | { type: 'APPROVE'; at: string; by: string }
  | { type: 'REJECT'; at: string; by: string; reason: string }
  | { type: 'REVOKE'; at: string; by: string };

type Emitted = {
  type: `referenceRequest.${'requested' | 'approved' | 'rejected' | 'revoked'}`;
  referenceRequestId: string;
  registrarId: string;
  requesterAccountId: string;
  ownerAccountId: string;
  reason?: string;
};

export const REFERENCE_REQUEST_STATES = ['PENDING', 'APPROVED', 'REJECTED', 'REVOKED'] as const;

export const referenceRequestMachine = setup({
  types: { context: {} as ReferenceRequestContext, input: {} as ReferenceRequestInput, events: {} as ReferenceRequestEvent, emitted: {} as Emitted },
  guards: {
    hasReason: ({ event }) => event.type === 'REJECT' && typeof event.reason === 'string' && event.reason.trim().length > 0,
  },
  actions: {
    decide: assign({ decidedAt: ({ event }) => event.at, decidedBy: ({ event }) => event.by, reason: ({ event }) => (event.type === 'REJECT' ? event.reason.trim() : null) }),
    revoke: assign({ revokedAt: ({ event }) => event.at, revokedBy: ({ event }) => event.by }),
    say: emit(({ context }, params: { what: Emitted['type'] }) => ({
      type: params.what, referenceRequestId: context.id, registrarId: context.registrarId,
      requesterAccountId: context.requesterAccountId, ownerAccountId: context.ownerAccountId,
      ...(params.what === 'referenceRequest.rejected' && context.reason ? { reason: context.reason } : {}),
    })),
  },
}).createMachine({
  id: 'referenceRequest',
  context: ({ input }) => ({ ...input, decidedAt: null, decidedBy: null, reason: null, revokedAt: null, revokedBy: null }),
  entry: { type: 'say', params: { what: 'referenceRequest.requested' } },
  initial: 'PENDING',
  states: {
    PENDING: {
      on: {
        APPROVE: { target: 'APPROVED', actions: ['decide', { type: 'say', params: { what: 'referenceRequest.approved' } }] },
        REJECT: { guard: 'hasReason', target: 'REJECTED', actions: ['decide', { type: 'say', params: { what: 'referenceRequest.rejected' } }] },
        REVOKE: { target: 'REVOKED', actions: ['revoke', { type: 'say', params: { what: 'referenceRequest.revoked' } }] },
      },
    },
    APPROVED: {
      on: { REVOKE: { target: 'REVOKED', actions: ['revoke', { type: 'say', params: { what: 'referenceRequest.revoked' } }] } },
    },
    REJECTED: { type: 'final' },
    REVOKED: { type: 'final' },
  },
});
