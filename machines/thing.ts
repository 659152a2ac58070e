import { setup, assign, emit } from 'xstate';

/**
 * Thing lifecycle (spec document 2, "States and transitions"). A thing registered by the tenant
 * (POST /api/v1/things) waits in REGISTERED (the spec's "none") until its enrollment token is
 * used; an enrollment births it in ROLLEDOFF. Revocation (DELETE thing) is orthogonal to the
 * lifecycle state: it marks the thing revoked (its certificate is on the CRL) in whatever state
 * it is, once: a second REVOKE is not accepted, which is how callers learn nothing changed.
 * Time comes in events (`at`). The factory surface adds its own transitions here.
 */
export interface ThingContext {
  id: string;
  accountId: string;
  manufacturer: string;
  model: string;
  serial: string;
  /** how it enrolled; absent while REGISTERED */
  enrolledBy?: string;
  enrolledAt?: string;
  revokedAt?: string;
}

/** With `enrolledBy` the thing is born enrolled (ROLLEDOFF); without, REGISTERED. */
export type ThingInput = Omit<ThingContext, 'revokedAt'>;

export type ThingEvent =
  | { type: 'ENROLL'; at: string; method: string }
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
  guards: { notRevoked, enrolled: ({ context }) => context.enrolledBy !== undefined },
}).createMachine({
  id: 'thing',
  context: ({ input }) => ({ ...input }),
  initial: 'REGISTERED',
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
    REGISTERED: {
      always: { guard: 'enrolled', target: 'ROLLEDOFF' },
      on: {
        ENROLL: {
          guard: 'notRevoked',
          target: 'ROLLEDOFF',
          actions: assign({ enrolledBy: ({ event }) => event.method, enrolledAt: ({ event }) => event.at }),
        },
      },
    },
    ROLLEDOFF: {
      entry: emit(({ context }) => ({
        type: 'thing.enrolled' as const, thingId: context.id, method: context.enrolledBy!,
        manufacturer: context.manufacturer, model: context.model, serial: context.serial,
      })),
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
