import { assign, emit, setup } from 'xstate';

/**
 * Factory registration (spec document 2): the account's factory capability badge. The account
 * REQUESTs it (REQUESTED); a platform operator APPROVEs or REFUSEs it, or REVOKEs it (from
 * REQUESTED or APPROVED). After a refusal or a revocation the account may REQUEST again.
 * USE is accepted only while APPROVED: what an approved registration unlocks (creating
 * registrars) asks the machine with `can({ type: 'USE' })`. Pure: time comes in events as `at`.
 */
export interface FactoryRegistrationInput {
  accountId: string;
  requestedAt: string;
  requestedBy: string;
  note: string | null;
}

export interface FactoryRegistrationContext extends FactoryRegistrationInput {
  decidedAt: string | null;
  decidedBy: string | null;
  reason: string | null;
}

export type FactoryRegistrationEvent =
  | { type: 'REQUEST'; at: string; by: string; note?: string | null }
  | { type: 'APPROVE' | 'REFUSE' | 'REVOKE'; at: string; by: string; reason?: string }
  | { type: 'USE' };

type Emitted = {
  type: `factoryRegistration.${'requested' | 'approved' | 'refused' | 'revoked'}`;
  accountId: string;
  by: string;
  reason?: string;
};

export const FACTORY_REGISTRATION_STATES = ['REQUESTED', 'APPROVED', 'REFUSED', 'REVOKED'] as const;

export const factoryRegistrationMachine = setup({
  types: { context: {} as FactoryRegistrationContext, input: {} as FactoryRegistrationInput, events: {} as FactoryRegistrationEvent, emitted: {} as Emitted },
  actions: {
    request: assign({
      requestedAt: ({ context, event }) => (event.type === 'REQUEST' ? event.at : context.requestedAt),
      requestedBy: ({ context, event }) => (event.type === 'REQUEST' ? event.by : context.requestedBy),
      note: ({ context, event }) => (event.type === 'REQUEST' ? event.note ?? null : context.note),
      decidedAt: null, decidedBy: null, reason: null,
    }),
    decide: assign({
      decidedAt: ({ context, event }) => ('at' in event ? event.at : context.decidedAt),
      decidedBy: ({ context, event }) => ('by' in event ? event.by : context.decidedBy),
      reason: ({ event }) => (event.type !== 'USE' && event.type !== 'REQUEST' ? event.reason ?? null : null),
    }),
    say: emit(({ context, event }, params: { what: Emitted['type'] }) => ({
      type: params.what, accountId: context.accountId, by: 'by' in event ? event.by : '',
      ...(event.type !== 'USE' && event.type !== 'REQUEST' && event.reason ? { reason: event.reason } : {}),
    })),
  },
}).createMachine({
  id: 'factoryRegistration',
  context: ({ input }) => ({ ...input, decidedAt: null, decidedBy: null, reason: null }),
  entry: emit(({ context }) => ({ type: 'factoryRegistration.requested' as const, accountId: context.accountId, by: context.requestedBy })),
  initial: 'REQUESTED',
  states: {
    REQUESTED: {
      on: {
        APPROVE: { target: 'APPROVED', actions: ['decide', { type: 'say', params: { what: 'factoryRegistration.approved' } }] },
        REFUSE: { target: 'REFUSED', actions: ['decide', { type: 'say', params: { what: 'factoryRegistration.refused' } }] },
        REVOKE: { target: 'REVOKED', actions: ['decide', { type: 'say', params: { what: 'factoryRegistration.revoked' } }] },
      },
    },
    APPROVED: {
      on: {
        // a target (itself, not re-entered) so that `can({ type: 'USE' })` answers true
        USE: { target: 'APPROVED' },
        REVOKE: { target: 'REVOKED', actions: ['decide', { type: 'say', params: { what: 'factoryRegistration.revoked' } }] },
      },
    },
    REFUSED: { on: { REQUEST: { target: 'REQUESTED', actions: ['request', { type: 'say', params: { what: 'factoryRegistration.requested' } }] } } },
    REVOKED: { on: { REQUEST: { target: 'REQUESTED', actions: ['request', { type: 'say', params: { what: 'factoryRegistration.requested' } }] } } },
  },
});
