import { assign, emit, setup } from 'xstate';

/**
 * Registrar (spec document 2): created PENDING; a platform operator APPROVEs or REJECTs it while
 * it is pending (decided once). Its canonical model is bound once (SET_CANONICAL_MODEL with the
 * same model again is accepted and changes nothing; another model is refused). The owner may
 * UPDATE it and DELETE it in any state. Pure: time comes in events as `at`.
 */
export interface RegistrarInput {
  id: string;
  accountId: string;
  createdAt: string;
  createdBy: string;
}

export interface RegistrarContext extends RegistrarInput {
  canonicalModelId: string | null;
  decidedAt: string | null;
  decidedBy: string | null;
  reason: string | null;
  deletedAt: string | null;
}

export type RegistrarEvent =
  | { type: 'APPROVE'; at: string; by: string }
  | { type: 'REJECT'; at: string; by: string; reason?: string }
  | { type: 'SET_CANONICAL_MODEL'; at: string; by: string; modelId: string }
  | { type: 'UPDATE'; at: string; by: string }
  | { type: 'DELETE'; at: string; by: string };

type Emitted =
  | { type: 'registrar.created'; registrarId: string; by: string }
  | { type: 'registrar.approved' | 'registrar.rejected' | 'registrar.updated' | 'registrar.deleted'; registrarId: string; by: string; reason?: string }
  | { type: 'registrar.canonical-model-set'; registrarId: string; modelId: string; by: string };

export const REGISTRAR_STATES = ['PENDING', 'APPROVED', 'REJECTED', 'DELETED'] as const;
export type RegistrarState = (typeof REGISTRAR_STATES)[number];

/** what every state but DELETED accepts */
const live = {
  SET_CANONICAL_MODEL: { guard: 'canonicalModelFree', actions: ['bindModel', 'sayModel'] },
  UPDATE: { actions: 'sayUpdated' },
  DELETE: { target: 'DELETED', actions: ['remove', 'sayDeleted'] },
} as const;

export const registrarMachine = setup({
  types: { context: {} as RegistrarContext, input: {} as RegistrarInput, events: {} as RegistrarEvent, emitted: {} as Emitted },
  guards: {
    /** set-once: unset, or the same model again (idempotent) */
    canonicalModelFree: ({ context, event }) => event.type === 'SET_CANONICAL_MODEL' && (context.canonicalModelId === null || context.canonicalModelId === event.modelId),
  },
  actions: {
    bindModel: assign({ canonicalModelId: ({ event }) => (event.type === 'SET_CANONICAL_MODEL' ? event.modelId : null) }),
    sayModel: emit(({ context, event }) => ({
      type: 'registrar.canonical-model-set' as const, registrarId: context.id, modelId: event.type === 'SET_CANONICAL_MODEL' ? event.modelId : '', by: event.by,
    })),
    decide: assign({
      decidedAt: ({ event }) => event.at,
      decidedBy: ({ event }) => event.by,
      reason: ({ event }) => (event.type === 'REJECT' ? event.reason ?? null : null),
    }),
    sayApproved: emit(({ context, event }) => ({ type: 'registrar.approved' as const, registrarId: context.id, by: event.by })),
    sayRejected: emit(({ context, event }) => ({
      type: 'registrar.rejected' as const, registrarId: context.id, by: event.by, ...(event.type === 'REJECT' && event.reason ? { reason: event.reason } : {}),
    })),
    sayUpdated: emit(({ context, event }) => ({ type: 'registrar.updated' as const, registrarId: context.id, by: event.by })),
    remove: assign({ deletedAt: ({ event }) => event.at }),
    sayDeleted: emit(({ context, event }) => ({ type: 'registrar.deleted' as const, registrarId: context.id, by: event.by })),
  },
}).createMachine({
  id: 'registrar',
  context: ({ input }) => ({ ...input, canonicalModelId: null, decidedAt: null, decidedBy: null, reason: null, deletedAt: null }),
  entry: emit(({ context }) => ({ type: 'registrar.created' as const, registrarId: context.id, by: context.createdBy })),
  initial: 'PENDING',
  states: {
    PENDING: {
      on: {
        ...live,
        APPROVE: { target: 'APPROVED', actions: ['decide', 'sayApproved'] },
        REJECT: { target: 'REJECTED', actions: ['decide', 'sayRejected'] },
      },
    },
    APPROVED: { on: live },
    REJECTED: { on: live },
    DELETED: { type: 'final' },
  },
});
