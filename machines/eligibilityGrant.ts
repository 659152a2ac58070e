import { assign, emit, setup } from 'xstate';

/**
 * Eligibility grant (spec document 2): created PENDING when another account redeems an owner's
 * eligibility artifact; the owner APPROVEs it (the requester becomes an eligible accessor of the
 * owner) or REJECTs it with a reason (required). Decided once. Pure: time comes in events as `at`.
 */
export interface EligibilityGrantInput {
  id: string;
  artifactId: string;
  ownerAccountId: string;
  requesterAccountId: string;
  createdAt: string;
  createdBy: string;
}

export interface EligibilityGrantContext extends EligibilityGrantInput {
  decidedAt: string | null;
  decidedBy: string | null;
  reason: string | null;
}

export type EligibilityGrantEvent =
  | { type: 'APPROVE'; at: string; by: string }
  | { type: 'REJECT'; at: string; by: string; reason: string };

type Emitted = {
  type: `eligibilityGrant.${'requested' | 'approved' | 'rejected'}`;
  grantId: string;
  ownerAccountId: string;
  requesterAccountId: string;
  reason?: string;
};

export const ELIGIBILITY_GRANT_STATES = ['PENDING', 'APPROVED', 'REJECTED'] as const;

export const eligibilityGrantMachine = setup({
  types: { context: {} as EligibilityGrantContext, input: {} as EligibilityGrantInput, events: {} as EligibilityGrantEvent, emitted: {} as Emitted },
  guards: {
    hasReason: ({ event }) => event.type === 'REJECT' && typeof event.reason === 'string' && event.reason.trim().length > 0,
  },
  actions: {
    decide: assign({ decidedAt: ({ event }) => event.at, decidedBy: ({ event }) => event.by, reason: ({ event }) => (event.type === 'REJECT' ? event.reason.trim() : null) }),
    say: emit(({ context }, params: { what: Emitted['type'] }) => ({
      type: params.what, grantId: context.id, ownerAccountId: context.ownerAccountId, requesterAccountId: context.requesterAccountId,
      ...(context.reason ? { reason: context.reason } : {}),
    })),
  },
}).createMachine({
  id: 'eligibilityGrant',
  context: ({ input }) => ({ ...input, decidedAt: null, decidedBy: null, reason: null }),
  entry: { type: 'say', params: { what: 'eligibilityGrant.requested' } },
  initial: 'PENDING',
  states: {
    PENDING: {
      on: {
        APPROVE: { target: 'APPROVED', actions: ['decide', { type: 'say', params: { what: 'eligibilityGrant.approved' } }] },
        REJECT: { guard: 'hasReason', target: 'REJECTED', actions: ['decide', { type: 'say', params: { what: 'eligibilityGrant.rejected' } }] },
      },
    },
    APPROVED: { type: 'final' },
    REJECTED: { type: 'final' },
  },
});
