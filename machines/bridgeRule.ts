import { assign, emit, setup } from 'xstate';

/**
 * A data bridge's rule (issue 34). ENABLED: its deliveries run. DISABLED: its owner stopped it
 * (its position stays; enabling resumes from there). FAILING: its sink refused every delivery for
 * `failingAfterMs` (a run of failures that long); deliveries keep being retried, the first one that
 * succeeds brings it back to ENABLED. The owner is told when it becomes FAILING (`rule.failing`,
 * a notification) and when it recovers. Pure: time comes as `at`.
 */
export interface BridgeRuleInput {
  id: string;
  accountId: string;
  name: string;
  /** how long a run of failures lasts before the rule is FAILING (BRIDGE_FAILING_AFTER_SECONDS at creation) */
  failingAfterMs: number;
  createdAt: string;
}

export interface BridgeRuleContext extends BridgeRuleInput {
  /** start of the current run of failures (null: the last delivery succeeded) */
  failingSince: string | null;
  lastError: string | null;
  lastErrorAt: string | null;
  updatedAt: string;
}

export type BridgeRuleEvent =
  | { type: 'ENABLE'; at: string; by: string }
  | { type: 'DISABLE'; at: string; by: string }
  | { type: 'UPDATE'; at: string; by: string }
  | { type: 'DELETE'; at: string; by: string }
  /** the sink refused or did not acknowledge a delivery */
  | { type: 'DELIVERY_FAILED'; at: string; error: string }
  /** a delivery was acknowledged (sent only while a failure run is counted) */
  | { type: 'DELIVERED'; at: string };

type Emitted =
  | { type: 'rule.created' | 'rule.enabled' | 'rule.disabled' | 'rule.updated' | 'rule.deleted' | 'rule.recovered'; ruleId: string; name: string; at: string; by?: string }
  | { type: 'rule.failing'; ruleId: string; name: string; at: string; since: string; error: string };

const say = (what: Exclude<Emitted['type'], 'rule.failing'>) => ({ type: 'say' as const, params: { what } });

export const bridgeRuleMachine = setup({
  types: {
    context: {} as BridgeRuleContext,
    input: {} as BridgeRuleInput,
    events: {} as BridgeRuleEvent,
    emitted: {} as Emitted,
  },
  actions: {
    touch: assign({ updatedAt: ({ event }) => event.at }),
    clearRun: assign({ failingSince: null }),
    recordFailure: assign(({ context, event }) => (event.type === 'DELIVERY_FAILED'
      ? { failingSince: context.failingSince ?? event.at, lastError: event.error.slice(0, 500), lastErrorAt: event.at }
      : {})),
    say: emit(({ context, event }, params: { what: Exclude<Emitted['type'], 'rule.failing'> }) => ({
      type: params.what, ruleId: context.id, name: context.name, at: event.at, ...('by' in event ? { by: event.by } : {}),
    }) as Emitted),
    sayFailing: emit(({ context, event }) => ({
      type: 'rule.failing' as const, ruleId: context.id, name: context.name, at: event.at,
      since: context.failingSince ?? event.at, error: context.lastError ?? '',
    })),
  },
  guards: {
    /** this failure makes the run last failingAfterMs */
    longRun: ({ context, event }) => event.type === 'DELIVERY_FAILED'
      && Date.parse(event.at) - Date.parse(context.failingSince ?? event.at) >= context.failingAfterMs,
    inARun: ({ context }) => context.failingSince !== null,
  },
}).createMachine({
  id: 'bridgeRule',
  context: ({ input }) => ({ ...input, failingSince: null, lastError: null, lastErrorAt: null, updatedAt: input.createdAt }),
  initial: 'ENABLED',
  entry: emit(({ context }) => ({ type: 'rule.created' as const, ruleId: context.id, name: context.name, at: context.createdAt })),
  states: {
    ENABLED: {
      on: {
        ENABLE: { actions: 'touch' },
        DISABLE: { target: 'DISABLED', actions: ['touch', 'clearRun', say('rule.disabled')] },
        UPDATE: { actions: ['touch', say('rule.updated')] },
        DELETE: { target: 'DELETED', actions: ['touch', say('rule.deleted')] },
        DELIVERY_FAILED: [
          { guard: 'longRun', target: 'FAILING', actions: ['recordFailure', 'sayFailing'] },
          { actions: 'recordFailure' },
        ],
        DELIVERED: { guard: 'inARun', actions: 'clearRun' },
      },
    },
    FAILING: {
      on: {
        ENABLE: { actions: 'touch' },
        DISABLE: { target: 'DISABLED', actions: ['touch', 'clearRun', say('rule.disabled')] },
        UPDATE: { actions: ['touch', say('rule.updated')] },
        DELETE: { target: 'DELETED', actions: ['touch', say('rule.deleted')] },
        DELIVERY_FAILED: { actions: 'recordFailure' },
        DELIVERED: { target: 'ENABLED', actions: ['clearRun', say('rule.recovered')] },
      },
    },
    DISABLED: {
      on: {
        ENABLE: { target: 'ENABLED', actions: ['touch', say('rule.enabled')] },
        DISABLE: { actions: 'touch' },
        UPDATE: { actions: ['touch', say('rule.updated')] },
        DELETE: { target: 'DELETED', actions: ['touch', say('rule.deleted')] },
      },
    },
    DELETED: { type: 'final' },
  },
});

export type BridgeRuleStatus = 'ENABLED' | 'DISABLED' | 'FAILING' | 'DELETED';
