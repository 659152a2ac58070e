import { setup, assign, emit, enqueueActions } from 'xstate';

/**
 * Thing lifecycle (spec document 2, "States and transitions"). A thing registered by the tenant
 * (POST /api/v1/things) waits in REGISTERED (the spec's "none") until its enrollment token is
 * used; an enrollment births it in ROLLEDOFF. Then PROVISION -> PROVISIONED, FACTORY_DONE (sent by
 * the PROVISION saga once its legs succeed) -> IN_FACTORY, FACTORY_HANDOVER -> HANDOVER_PENDING,
 * ACTIVATE -> ACTIVATED <-> DEACTIVATED; PROVISION_FAILED (the saga failed) returns PROVISIONED to ROLLEDOFF. ANNIHILATE ends it from any state (revoking it too).
 * Revocation (DELETE thing) is orthogonal to the lifecycle state: it marks the thing revoked (its
 * certificate is on the CRL) in whatever state it is, once; a revoked thing makes no further
 * lifecycle step but can still be annihilated. Every state change emits `thing.stateChanged`
 * (the state-change log, view `thing_state_changes`). Time comes in events (`at`).
 * FACTORY_DELIVERY is asked (`can`), never sent: may the factory still deliver to the thing
 * (provision it, report legs)? From ROLLEDOFF to IN_FACTORY while not revoked; factory-handover closes it.
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
  /** when the lifecycle state last changed (absent while REGISTERED) */
  stateAt?: string;
}

/** With `enrolledBy` the thing is born enrolled (ROLLEDOFF); without, REGISTERED. */
export type ThingInput = Omit<ThingContext, 'revokedAt' | 'stateAt'>;

export type ThingEvent =
  | { type: 'ENROLL'; at: string; method: string }
  | { type: 'PROVISION'; at: string }
  | { type: 'FACTORY_DONE'; at: string }
  | { type: 'PROVISION_FAILED'; at: string }
  | { type: 'FACTORY_HANDOVER'; at: string }
  | { type: 'ACTIVATE'; at: string }
  | { type: 'DEACTIVATE'; at: string }
  /** terminal; revokes the thing unless it already is (`serial`: its certificate, if any) */
  | { type: 'ANNIHILATE'; at: string; serial: string | null; by: string }
  | { type: 'REVOKE'; at: string; serial: string | null; by: string }
  /** the thing joined another account (access code): events go to the new owner from now on */
  | { type: 'TRANSFER'; at: string; accountId: string }
  /** asked, never sent (see above) */
  | { type: 'FACTORY_DELIVERY' };

export type ThingState = 'REGISTERED' | 'ROLLEDOFF' | 'PROVISIONED' | 'IN_FACTORY' | 'HANDOVER_PENDING' | 'ACTIVATED' | 'DEACTIVATED' | 'ANNIHILATED';

const notRevoked = ({ context }: { context: ThingContext }) => !context.revokedAt;

/** A lifecycle step: the event moves the thing from `from` to `to` unless it is revoked. */
function step(from: ThingState, to: ThingState) {
  return { guard: 'notRevoked' as const, target: to, actions: { type: 'changed' as const, params: { from, to } } };
}

/** FACTORY_DELIVERY in a state where factory deliveries are open (a target, so that `can` sees a transition). */
function factoryOpen(state: ThingState) {
  return { guard: 'notRevoked' as const, target: state };
}

/** ANNIHILATE, accepted in every state but the terminal one (revoked or not). */
function annihilate(from: ThingState) {
  return { target: 'ANNIHILATED' as const, actions: ['revokeOnce' as const, { type: 'changed' as const, params: { from, to: 'ANNIHILATED' as const } }] };
}

export const thingMachine = setup({
  types: {
    context: {} as ThingContext,
    input: {} as ThingInput,
    events: {} as ThingEvent,
    emitted: {} as
      /** also the log's first row (from, to, event, at): no second event per new thing */
      | { type: 'thing.enrolled'; thingId: string; method: string; manufacturer: string; model: string; serial: string; from: 'REGISTERED'; to: 'ROLLEDOFF'; event: 'ENROLL'; at: string }
      | { type: 'thing.stateChanged'; thingId: string; from: string; to: string; event: string; at: string }
      | { type: 'thing.revoked'; thingId: string; serial: string | null; by: string }
      | { type: 'thing.joined'; thingId: string; from: string; to: string; at: string },
  },
  guards: { notRevoked, enrolled: ({ context }) => context.enrolledBy !== undefined },
  actions: {
    /** The state change's record: emitted (the log) and its time kept (the state's `updated_at`). */
    changed: enqueueActions(({ context, event, enqueue }, params: { from: ThingState; to: ThingState }) => {
      // the birth of a thing born enrolled has no event of its own (the `always` at start)
      const at = 'at' in event ? event.at : context.enrolledAt!;
      enqueue.assign({ stateAt: at });
      // the birth (REGISTERED -> ROLLEDOFF) is recorded by `thing.enrolled`, which carries the change
      if (params.from === 'REGISTERED' && params.to === 'ROLLEDOFF') {
        enqueue.emit({
          type: 'thing.enrolled' as const, thingId: context.id, method: context.enrolledBy!,
          manufacturer: context.manufacturer, model: context.model, serial: context.serial,
          from: 'REGISTERED' as const, to: 'ROLLEDOFF' as const, event: 'ENROLL' as const, at,
        });
      } else {
        enqueue.emit({ type: 'thing.stateChanged' as const, thingId: context.id, ...params, event: 'at' in event ? event.type : 'ENROLL', at });
      }
    }),
    /** an annihilated thing is revoked; one already revoked stays as it was */
    revokeOnce: enqueueActions(({ context, event, enqueue }) => {
      if (context.revokedAt || event.type !== 'ANNIHILATE') return;
      enqueue.assign({ revokedAt: event.at });
      enqueue.emit({ type: 'thing.revoked' as const, thingId: context.id, serial: event.serial, by: event.by });
    }),
    revoke: assign({ revokedAt: ({ event }) => ('serial' in event ? event.at : undefined) }),
    announceRevoked: emit(({ context, event }) => ({
      type: 'thing.revoked' as const, thingId: context.id, serial: 'serial' in event ? event.serial : null, by: 'by' in event ? event.by : '',
    })),
  },
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
    REVOKE: { guard: 'notRevoked', actions: ['revoke', 'announceRevoked'] },
  },
  states: {
    REGISTERED: {
      // born enrolled (claim, factory enrollment): the birth is the log's first row
      always: {
        guard: 'enrolled', target: 'ROLLEDOFF',
        actions: { type: 'changed', params: { from: 'REGISTERED', to: 'ROLLEDOFF' } },
      },
      on: {
        ANNIHILATE: annihilate('REGISTERED'),
        ENROLL: {
          guard: 'notRevoked',
          target: 'ROLLEDOFF',
          actions: [
            assign({ enrolledBy: ({ event }) => event.method, enrolledAt: ({ event }) => event.at }),
            { type: 'changed', params: { from: 'REGISTERED', to: 'ROLLEDOFF' } },
          ],
        },
      },
    },
    ROLLEDOFF: { on: { PROVISION: step('ROLLEDOFF', 'PROVISIONED'), ANNIHILATE: annihilate('ROLLEDOFF'), FACTORY_DELIVERY: factoryOpen('ROLLEDOFF') } },
    PROVISIONED: {
      on: {
        FACTORY_DONE: step('PROVISIONED', 'IN_FACTORY'),
        // the PROVISION saga failed: back to ROLLEDOFF, where a new POST provision may start another run
        PROVISION_FAILED: { target: 'ROLLEDOFF', actions: { type: 'changed', params: { from: 'PROVISIONED', to: 'ROLLEDOFF' } } },
        ANNIHILATE: annihilate('PROVISIONED'),
        FACTORY_DELIVERY: factoryOpen('PROVISIONED'),
      },
    },
    IN_FACTORY: { on: { FACTORY_HANDOVER: step('IN_FACTORY', 'HANDOVER_PENDING'), ANNIHILATE: annihilate('IN_FACTORY'), FACTORY_DELIVERY: factoryOpen('IN_FACTORY') } },
    HANDOVER_PENDING: { on: { ACTIVATE: step('HANDOVER_PENDING', 'ACTIVATED'), ANNIHILATE: annihilate('HANDOVER_PENDING') } },
    ACTIVATED: { on: { DEACTIVATE: step('ACTIVATED', 'DEACTIVATED'), ANNIHILATE: annihilate('ACTIVATED') } },
    DEACTIVATED: { on: { ACTIVATE: step('DEACTIVATED', 'ACTIVATED'), ANNIHILATE: annihilate('DEACTIVATED') } },
    ANNIHILATED: { type: 'final' },
  },
});
