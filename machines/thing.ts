import { setup, assign, emit } from 'xstate';

/**
 * Thing lifecycle (spec document 2, "States and transitions"). Born ROLLEDOFF by an enrollment.
 * Revocation (DELETE thing) is orthogonal to the lifecycle state: it marks the thing revoked
 * (its certificate is on the CRL) in whatever state it is, once. Time comes in events (`at`).
 * The factory surface adds its own transitions here (provision saga, handover).
 */
export interface ThingContext {
  id: string;
  accountId: string;
  manufacturer: string;
  model: string;
  serial: string;
  enrolledBy: string;
  enrolledAt: string;
  revokedAt?: string;
}

export type ThingInput = Omit<ThingContext, 'revokedAt'>;

export type ThingEvent =
  | { type: 'PROVISION'; at: string }
  | { type: 'FACTORY_HANDOVER'; at: string }
  | { type: 'REVOKE'; at: string; serial: string | null; by: string }
  /** the thing joined another account (access code): events go to the new owner from now on */
  | { type: 'TRANSFER'; at: string; accountId: string };

const notRevoked = ({ context }: { context: ThingContext }) => !context.revokedAt;

export const thingMachine = setup({
  types: {
    context: {} as ThingContext,
    input: {} as ThingInput,
    events: {} as ThingEvent,
    emitted: {} as
      | { type: 'thing.enrolled'; thingId: string; method: string; manufacturer: string; model: string; serial: string }
      | { type: 'thing.stateChanged'; thingId: string; from: string; to: string; at: string }
      | { type: 'thing.revoked'; thingId: string; serial: string | null; by: string }
      | { type: 'thing.joined'; thingId: string; from: string; to: string; at: string },
  },
  guards: { notRevoked },
}).createMachine({
  id: 'thing',
  context: ({ input }) => ({ ...input }),
  initial: 'ROLLEDOFF',
  entry: emit(({ context }) => ({
    type: 'thing.enrolled' as const, thingId: context.id, method: context.enrolledBy,
    manufacturer: context.manufacturer, model: context.model, serial: context.serial,
  })),
  on: {
    TRANSFER: {
      guard: 'notRevoked',
      actions: [
        emit(({ context, event }) => ({ type: 'thing.joined' as const, thingId: context.id, from: context.accountId, to: event.accountId, at: event.at })),
        assign({ accountId: ({ event }) => event.accountId }),
      ],
    },
    REVOKE: {
      guard: 'notRevoked',
      actions: [
        assign({ revokedAt: ({ event }) => event.at }),
        emit(({ context, event }) => ({ type: 'thing.revoked' as const, thingId: context.id, serial: event.serial, by: event.by })),
      ],
    },
  },
  states: {
    ROLLEDOFF: {
      on: {
        PROVISION: {
          guard: 'notRevoked',
          target: 'PROVISIONED',
          actions: emit(({ context, event }) => ({ type: 'thing.stateChanged' as const, thingId: context.id, from: 'ROLLEDOFF', to: 'PROVISIONED', at: event.at })),
        },
      },
    },
    PROVISIONED: {},
    IN_FACTORY: {
      on: {
        FACTORY_HANDOVER: {
          guard: 'notRevoked',
          target: 'HANDOVER_PENDING',
          actions: emit(({ context, event }) => ({ type: 'thing.stateChanged' as const, thingId: context.id, from: 'IN_FACTORY', to: 'HANDOVER_PENDING', at: event.at })),
        },
      },
    },
    HANDOVER_PENDING: {},
    ACTIVATED: {},
    DEACTIVATED: {},
  },
});
