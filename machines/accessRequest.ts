import { assign, emit, setup } from 'xstate';

/**
 * Access request (spec document 2): an account asks the owner of a registrar for access to it;
 * PENDING until the owner DECIDEs it APPROVED or REJECTED, once (approve and reject are shorthand
 * for DECIDE). Pure: time comes in events as `at`.
 */
export const ACCESS_DECISIONS = ['APPROVED', 'REJECTED'] as const;
export type AccessDecision = (typeof ACCESS_DECISIONS)[number];

export interface AccessRequestInput {
  id: string;
  requesterAccountId: string;
  ownerAccountId: string;
  registrarId: string;
  createdAt: string;
  createdBy: string;
}

export interface AccessRequestContext extends AccessRequestInput {
  decidedAt: string | null;
  decidedBy: string | null;
  reason: string | null;
}

export type AccessRequestEvent = { type: 'DECIDE'; decision: AccessDecision; at: string; by: string; reason?: string };

type Emitted =
  | { type: 'accessRequest.created'; accessRequestId: string; registrarId: string; requesterAccountId: string }
  | { type: 'accessRequest.decided'; accessRequestId: string; registrarId: string; requesterAccountId: string; decision: AccessDecision; by: string };

export const ACCESS_REQUEST_STATES = ['PENDING', 'APPROVED', 'REJECTED'] as const;

export const accessRequestMachine = setup({
  types: { context: {} as AccessRequestContext, input: {} as AccessRequestInput, events: {} as AccessRequestEvent, emitted: {} as Emitted },
  guards: {
    approves: ({ event }) => event.decision === 'APPROVED',
    rejects: ({ event }) => event.decision === 'REJECTED',
  },
  actions: {
    decide: assign({ decidedAt: ({ event }) => event.at, decidedBy: ({ event }) => event.by, reason: ({ event }) => event.reason ?? null }),
    say: emit(({ context, event }) => ({
      type: 'accessRequest.decided' as const, accessRequestId: context.id, registrarId: context.registrarId,
      requesterAccountId: context.requesterAccountId, decision: event.decision, by: event.by,
    })),
  },
}).createMachine({
  id: 'accessRequest',
  context: ({ input }) => ({ ...input, decidedAt: null, decidedBy: null, reason: null }),
  entry: emit(({ context }) => ({ type: 'accessRequest.created' as const, accessRequestId: context.id, registrarId: context.registrarId, requesterAccountId: context.requesterAccountId })),
  initial: 'PENDING',
  states: {
    PENDING: {
      on: {
        DECIDE: [
          { guard: 'approves', target: 'APPROVED', actions: ['decide', 'say'] },
          { guard: 'rejects', target: 'REJECTED', actions: ['decide', 'say'] },
        ],
      },
    },
    APPROVED: { type: 'final' },
    REJECTED: { type: 'final' },
  },
});
