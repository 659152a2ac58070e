import { assign, emit, setup } from 'xstate';

/**
 * An OTA rollout (issue 20, in the manner of Eclipse hawkBit): READY -> START -> RUNNING, which
 * runs its groups one after the other (`current`); PAUSE/RESUME hold and release the start of the
 * next group (and deliveries); a group over its error threshold STOPS the rollout; the last group
 * done FINISHES it; CANCEL ends it from READY, RUNNING or PAUSED. A group that reaches its success
 * threshold while the rollout is paused is remembered (`currentDone`) and the next one starts on
 * RESUME. Pure: time comes as `at`.
 */
export interface RolloutInput {
  id: string;
  accountId: string;
  /** number of groups (at least 1) */
  groups: number;
  createdAt: string;
}

export interface RolloutContext extends RolloutInput {
  /** index of the group in progress; -1 before START */
  current: number;
  /** the current group reached its success threshold while the rollout was paused */
  currentDone: boolean;
  startedAt: string | null;
  endedAt: string | null;
  /** why it stopped (the group over its error threshold) */
  reason: string | null;
}

export type RolloutEvent =
  | { type: 'START'; at: string }
  | { type: 'PAUSE'; at: string }
  | { type: 'RESUME'; at: string }
  | { type: 'CANCEL'; at: string }
  /** group `index` reached its success threshold */
  | { type: 'GROUP_SUCCEEDED'; at: string; index: number }
  /** group `index` passed its error threshold (or can no longer reach its success threshold) */
  | { type: 'GROUP_FAILED'; at: string; index: number };

export const ROLLOUT_STATES = ['READY', 'RUNNING', 'PAUSED', 'STOPPED', 'FINISHED', 'CANCELLED'] as const;
export type RolloutState = (typeof ROLLOUT_STATES)[number];

type Emitted = { type: 'ota.rollout.changed'; rolloutId: string; state: RolloutState; group: number };

const isCurrent = ({ context, event }: { context: RolloutContext; event: RolloutEvent }) => 'index' in event && event.index === context.current;
const isLast = (context: RolloutContext) => context.current + 1 >= context.groups;

export const rolloutMachine = setup({
  types: {
    context: {} as RolloutContext,
    input: {} as RolloutInput,
    events: {} as RolloutEvent,
    emitted: {} as Emitted,
  },
  guards: {
    currentGroup: isCurrent,
    lastGroup: (args) => isCurrent(args) && isLast(args.context),
    currentDone: ({ context }) => context.currentDone,
    currentDoneLast: ({ context }) => context.currentDone && isLast(context),
  },
  actions: {
    advance: assign({ current: ({ context }) => context.current + 1, currentDone: false }),
    end: assign({ endedAt: ({ event }) => event.at }),
    stopReason: assign({ reason: ({ event }) => `group ${'index' in event ? event.index + 1 : '?'} passed its error threshold` }),
    announce: emit(({ context }, params: { state: RolloutState }) => ({
      type: 'ota.rollout.changed' as const, rolloutId: context.id, state: params.state, group: context.current,
    })),
  },
}).createMachine({
  id: 'rollout',
  context: ({ input }) => ({ ...input, current: -1, currentDone: false, startedAt: null, endedAt: null, reason: null }),
  initial: 'READY',
  states: {
    READY: {
      on: {
        START: { target: 'RUNNING', actions: [assign({ startedAt: ({ event }) => event.at, current: 0 }), { type: 'announce', params: { state: 'RUNNING' } }] },
        CANCEL: { target: 'CANCELLED', actions: ['end', { type: 'announce', params: { state: 'CANCELLED' } }] },
      },
    },
    RUNNING: {
      on: {
        GROUP_SUCCEEDED: [
          { guard: 'lastGroup', target: 'FINISHED', actions: ['end', { type: 'announce', params: { state: 'FINISHED' } }] },
          { guard: 'currentGroup', actions: 'advance' },
        ],
        GROUP_FAILED: { guard: 'currentGroup', target: 'STOPPED', actions: ['end', 'stopReason', { type: 'announce', params: { state: 'STOPPED' } }] },
        PAUSE: { target: 'PAUSED', actions: { type: 'announce', params: { state: 'PAUSED' } } },
        CANCEL: { target: 'CANCELLED', actions: ['end', { type: 'announce', params: { state: 'CANCELLED' } }] },
      },
    },
    PAUSED: {
      on: {
        GROUP_SUCCEEDED: { guard: 'currentGroup', actions: assign({ currentDone: true }) },
        GROUP_FAILED: { guard: 'currentGroup', target: 'STOPPED', actions: ['end', 'stopReason', { type: 'announce', params: { state: 'STOPPED' } }] },
        RESUME: [
          { guard: 'currentDoneLast', target: 'FINISHED', actions: ['end', { type: 'announce', params: { state: 'FINISHED' } }] },
          { guard: 'currentDone', target: 'RUNNING', actions: ['advance', { type: 'announce', params: { state: 'RUNNING' } }] },
          { target: 'RUNNING', actions: { type: 'announce', params: { state: 'RUNNING' } } },
        ],
        CANCEL: { target: 'CANCELLED', actions: ['end', { type: 'announce', params: { state: 'CANCELLED' } }] },
      },
    },
    STOPPED: { type: 'final' },
    FINISHED: { type: 'final' },
    CANCELLED: { type: 'final' },
  },
});
