import { assign, emit, setup } from 'xstate';

/**
 * State-change subscription (spec document 2, "States and transitions"; the ACTIVE -> SUSPENDED
 * rule is ours, docs/decisions.md). ACTIVE: changes are delivered to its target. It becomes
 * SUSPENDED when a receiver answers 410 Gone, after `suspendAfter` deliveries in a row were
 * dropped (each failed every attempt of its retry budget), or when its owner PATCHes
 * status=SUSPENDED. A SUSPENDED subscription accepts only ACTIVATE (PATCH status=ACTIVE), which
 * clears the failure run; every other edit, and DELETE, is refused there (THM-60150). A delivery
 * that succeeds ends a failure run. Pure: time comes as `at`.
 */
export interface SubscriptionInput {
  id: string;
  accountId: string;
  /** consecutive dropped deliveries that suspend it (WEBHOOK_SUSPEND_AFTER at creation) */
  suspendAfter: number;
  createdAt: string;
}

export type SuspendReason = 'receiver-gone' | 'delivery-failures' | 'owner';

export interface SubscriptionContext extends SubscriptionInput {
  /** deliveries dropped in a row since the last success or activation */
  consecutiveFailures: number;
  suspendedAt: string | null;
  suspendedReason: SuspendReason | null;
  updatedAt: string;
}

export type SubscriptionEvent =
  /** an edit of target_url or event_filter */
  | { type: 'UPDATE'; at: string; by: string }
  | { type: 'ACTIVATE'; at: string; by: string }
  | { type: 'SUSPEND'; at: string; by: string }
  | { type: 'DELETE'; at: string; by: string }
  /** a delivery succeeded (sent only while a failure run is counted) */
  | { type: 'DELIVERED'; at: string }
  /** a delivery was dropped after its last attempt failed */
  | { type: 'DELIVERY_DROPPED'; at: string; lastStatus: number | null }
  /** the receiver answered 410 Gone */
  | { type: 'RECEIVER_GONE'; at: string };

type Emitted =
  | { type: 'subscription.created' | 'subscription.updated' | 'subscription.activated' | 'subscription.deleted'; subscriptionId: string; at: string; by?: string }
  | { type: 'subscription.suspended'; subscriptionId: string; at: string; reason: SuspendReason; by?: string };

/** the transition into SUSPENDED, with its reason */
const suspend = (reason: SuspendReason, ...more: ('touch' | 'countFailure')[]) => ({
  target: 'SUSPENDED' as const,
  actions: [...more, { type: 'markSuspended' as const, params: { reason } }, { type: 'say' as const, params: { what: 'subscription.suspended' as const, reason } }],
});

export const subscriptionMachine = setup({
  types: {
    context: {} as SubscriptionContext,
    input: {} as SubscriptionInput,
    events: {} as SubscriptionEvent,
    emitted: {} as Emitted,
  },
  actions: {
    touch: assign({ updatedAt: ({ event }) => event.at }),
    countFailure: assign({ consecutiveFailures: ({ context }) => context.consecutiveFailures + 1 }),
    markSuspended: assign(({ event }, params: { reason: SuspendReason }) => ({ suspendedAt: event.at, suspendedReason: params.reason })),
    say: emit(({ context, event }, params: { what: Emitted['type']; reason?: SuspendReason }) => ({
      type: params.what, subscriptionId: context.id, at: event.at, ...('by' in event ? { by: event.by } : {}), ...(params.reason ? { reason: params.reason } : {}),
    }) as Emitted),
  },
  guards: {
    lastStraw: ({ context }) => context.consecutiveFailures + 1 >= context.suspendAfter,
    inARun: ({ context }) => context.consecutiveFailures > 0,
  },
}).createMachine({
  id: 'subscription',
  context: ({ input }) => ({ ...input, consecutiveFailures: 0, suspendedAt: null, suspendedReason: null, updatedAt: input.createdAt }),
  initial: 'ACTIVE',
  entry: emit(({ context }) => ({ type: 'subscription.created' as const, subscriptionId: context.id, at: context.createdAt })),
  states: {
    ACTIVE: {
      on: {
        UPDATE: { actions: ['touch', { type: 'say', params: { what: 'subscription.updated' } }] },
        // PATCH status=ACTIVE of an active subscription: accepted, nothing to change (an empty
        // transition would read as refused to `can`)
        ACTIVATE: { actions: 'touch' },
        SUSPEND: suspend('owner', 'touch'),
        DELETE: { target: 'DELETED', actions: ['touch', { type: 'say', params: { what: 'subscription.deleted' } }] },
        DELIVERED: { guard: 'inARun', actions: assign({ consecutiveFailures: 0 }) },
        DELIVERY_DROPPED: [
          { guard: 'lastStraw', ...suspend('delivery-failures', 'countFailure') },
          { actions: 'countFailure' },
        ],
        RECEIVER_GONE: suspend('receiver-gone'),
      },
    },
    SUSPENDED: {
      on: {
        ACTIVATE: {
          target: 'ACTIVE',
          actions: [assign({ consecutiveFailures: 0, suspendedAt: null, suspendedReason: null }), 'touch', { type: 'say', params: { what: 'subscription.activated' } }],
        },
      },
    },
    DELETED: { type: 'final' },
  },
});

export type SubscriptionStatus = 'ACTIVE' | 'SUSPENDED' | 'DELETED';
