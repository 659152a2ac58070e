import { assign, emit, setup } from 'xstate';

/**
 * Factory service (spec document 2, "States and transitions"): registered (ACTIVE) -> DELETE ->
 * SOFT_DELETED (its credentials stop working; drain and garbage collection follow) -> drain,
 * when no active saga leg references it -> HARD_DELETED. Credential rotation in any state before
 * that: ROTATE sets `rotationPending` (old and new secret both work), CONFIRM_ROTATION clears
 * it and is refused when none is pending. Pure: secrets never enter the machine; time comes as `at`.
 */
export interface FactoryServiceInput {
  id: string;
  accountId: string;
  role: 'identify' | 'provision';
  modelId: string;
  registrarId: string | null;
  accessKeyId: string;
  createdAt: string;
}

export interface FactoryServiceContext extends FactoryServiceInput {
  rotationPending: boolean;
  rotatedAt: string | null;
  deletedAt: string | null;
  drainedAt: string | null;
}

export type FactoryServiceEvent =
  | { type: 'UPDATE'; at: string; by?: string }
  | { type: 'ROTATE'; at: string; by?: string }
  | { type: 'CONFIRM_ROTATION'; at: string; by?: string }
  | { type: 'DELETE'; at: string; by?: string }
  /** `activeLegs`: saga legs still referencing the service (the drain waits for them) */
  | { type: 'DRAIN'; at: string; activeLegs: number; by?: string };

type Emitted = { type: `factoryService.${'registered' | 'updated' | 'rotation-started' | 'rotation-confirmed' | 'soft-deleted' | 'drained'}`; factoryServiceId: string; by?: string };

export const factoryServiceMachine = setup({
  types: {
    context: {} as FactoryServiceContext,
    input: {} as FactoryServiceInput,
    events: {} as FactoryServiceEvent,
    emitted: {} as Emitted,
  },
  actions: {
    say: emit(({ context, event }, params: { what: Emitted['type'] }) => ({ type: params.what, factoryServiceId: context.id, by: event.by })),
  },
  guards: {
    rotationPending: ({ context }) => context.rotationPending,
    noActiveLegs: ({ event }) => event.type === 'DRAIN' && event.activeLegs === 0,
  },
}).createMachine({
  id: 'factoryService',
  context: ({ input }) => ({ ...input, rotationPending: false, rotatedAt: null, deletedAt: null, drainedAt: null }),
  initial: 'ACTIVE',
  entry: emit(({ context }) => ({ type: 'factoryService.registered' as const, factoryServiceId: context.id })),
  states: {
    ACTIVE: {
      on: {
        UPDATE: { actions: { type: 'say', params: { what: 'factoryService.updated' } } },
        ROTATE: { actions: [assign({ rotationPending: true, rotatedAt: ({ event }) => event.at }), { type: 'say', params: { what: 'factoryService.rotation-started' } }] },
        CONFIRM_ROTATION: { guard: 'rotationPending', actions: [assign({ rotationPending: false }), { type: 'say', params: { what: 'factoryService.rotation-confirmed' } }] },
        DELETE: { target: 'SOFT_DELETED', actions: [assign({ deletedAt: ({ event }) => event.at }), { type: 'say', params: { what: 'factoryService.soft-deleted' } }] },
      },
    },
    SOFT_DELETED: {
      on: {
        ROTATE: { actions: [assign({ rotationPending: true, rotatedAt: ({ event }) => event.at }), { type: 'say', params: { what: 'factoryService.rotation-started' } }] },
        CONFIRM_ROTATION: { guard: 'rotationPending', actions: [assign({ rotationPending: false }), { type: 'say', params: { what: 'factoryService.rotation-confirmed' } }] },
        DRAIN: { guard: 'noActiveLegs', target: 'HARD_DELETED', actions: [assign({ drainedAt: ({ event }) => event.at }), { type: 'say', params: { what: 'factoryService.drained' } }] },
      },
    },
    HARD_DELETED: { type: 'final' },
  },
});

export type FactoryServiceState = 'ACTIVE' | 'SOFT_DELETED' | 'HARD_DELETED';
export const FACTORY_SERVICE_STATES: readonly FactoryServiceState[] = ['ACTIVE', 'SOFT_DELETED', 'HARD_DELETED'];
