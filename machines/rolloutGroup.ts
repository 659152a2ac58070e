import { assign, emit, setup } from 'xstate';

/**
 * One group of an OTA rollout: SCHEDULED -> START -> RUNNING -> TALLY (the counts of its actions)
 * -> FINISHED once `succeeded` reaches the success threshold, or ERROR once `failed` passes the
 * error threshold, or when every action ended without reaching the success threshold. Both
 * thresholds are percentages of the targets that can still answer: the group's targets less the
 * `skipped` ones (revoked during the rollout), so revoked things never hold a group back; a group
 * whose targets were all skipped is FINISHED. CANCEL ends a SCHEDULED or RUNNING group. The error
 * threshold is checked first. A TALLY with the same counts is refused (nothing to write). Pure:
 * time comes as `at`.
 */
export interface RolloutGroupInput {
  id: string;
  rolloutId: string;
  accountId: string;
  /** 0-based position in the rollout */
  index: number;
  /** targets in the group */
  total: number;
  /** percent of the targets that must succeed */
  successThreshold: number;
  /** percent of the targets whose failure stops the rollout (strictly more than) */
  errorThreshold: number;
}

export interface RolloutGroupContext extends RolloutGroupInput {
  succeeded: number;
  failed: number;
  /** actions skipped because their thing was revoked (absent from snapshots older than issue 37: 0) */
  skipped?: number;
  /** actions that ended (succeeded, failed, skipped or cancelled) */
  finished: number;
  startedAt: string | null;
  endedAt: string | null;
}

export type RolloutGroupEvent =
  | { type: 'START'; at: string }
  | { type: 'TALLY'; at: string; succeeded: number; failed: number; skipped: number; finished: number }
  | { type: 'CANCEL'; at: string };

export const ROLLOUT_GROUP_STATES = ['SCHEDULED', 'RUNNING', 'FINISHED', 'ERROR', 'CANCELLED'] as const;
export type RolloutGroupState = (typeof ROLLOUT_GROUP_STATES)[number];

type Emitted = { type: 'ota.group.ended'; rolloutId: string; groupId: string; index: number; state: 'FINISHED' | 'ERROR' };
type Tally = Extract<RolloutGroupEvent, { type: 'TALLY' }>;

const tally = (event: RolloutGroupEvent) => event as Tally;
/** the targets the thresholds are percentages of: those not skipped */
const answerable = (context: RolloutGroupContext, event: RolloutGroupEvent) => context.total - tally(event).skipped;

export const rolloutGroupMachine = setup({
  types: {
    context: {} as RolloutGroupContext,
    input: {} as RolloutGroupInput,
    events: {} as RolloutGroupEvent,
    emitted: {} as Emitted,
  },
  guards: {
    errorPassed: ({ context, event }) => tally(event).failed * 100 > context.errorThreshold * answerable(context, event),
    successReached: ({ context, event }) => tally(event).succeeded * 100 >= context.successThreshold * answerable(context, event),
    allEnded: ({ context, event }) => tally(event).finished >= context.total,
    changed: ({ context, event }) => {
      const t = tally(event);
      return t.succeeded !== context.succeeded || t.failed !== context.failed || t.skipped !== (context.skipped ?? 0) || t.finished !== context.finished;
    },
  },
  actions: {
    count: assign(({ event }) => {
      const t = tally(event);
      return { succeeded: t.succeeded, failed: t.failed, skipped: t.skipped, finished: t.finished };
    }),
    end: assign({ endedAt: ({ event }) => event.at }),
    announce: emit(({ context }, params: { state: 'FINISHED' | 'ERROR' }) => ({
      type: 'ota.group.ended' as const, rolloutId: context.rolloutId, groupId: context.id, index: context.index, state: params.state,
    })),
  },
}).createMachine({
  id: 'rolloutGroup',
  context: ({ input }) => ({ ...input, succeeded: 0, failed: 0, skipped: 0, finished: 0, startedAt: null, endedAt: null }),
  initial: 'SCHEDULED',
  states: {
    SCHEDULED: {
      on: {
        START: { target: 'RUNNING', actions: assign({ startedAt: ({ event }) => event.at }) },
        CANCEL: { target: 'CANCELLED', actions: 'end' },
      },
    },
    RUNNING: {
      on: {
        TALLY: [
          { guard: 'errorPassed', target: 'ERROR', actions: ['count', 'end', { type: 'announce', params: { state: 'ERROR' } }] },
          { guard: 'successReached', target: 'FINISHED', actions: ['count', 'end', { type: 'announce', params: { state: 'FINISHED' } }] },
          { guard: 'allEnded', target: 'ERROR', actions: ['count', 'end', { type: 'announce', params: { state: 'ERROR' } }] },
          { guard: 'changed', actions: 'count' },
        ],
        CANCEL: { target: 'CANCELLED', actions: 'end' },
      },
    },
    FINISHED: {
      // late results of the group's other devices are still counted (the rollout has moved on)
      on: { TALLY: { guard: 'changed', actions: 'count' } },
    },
    ERROR: { on: { TALLY: { guard: 'changed', actions: 'count' } } },
    CANCELLED: { on: { TALLY: { guard: 'changed', actions: 'count' } } },
  },
});
