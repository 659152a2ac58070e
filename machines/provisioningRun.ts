import { assign, emit, enqueueActions, setup } from 'xstate';

/**
 * A PROVISION saga run (spec document 2: POST /api/v1/things/{id}/provision starts it; the factory
 * backend reports each leg through the provisioning-result webhook). The legs run one after
 * another, in order (`identify` when the model has an identify-role factory service, then
 * `provision`). Each leg is attempted up to `maxAttempts` times: an attempt is DISPATCHed (the
 * gateway calls the backend), then ends with the backend's RESULT, a failed call
 * (ATTEMPT_FAILED) or a TIMEOUT; a failed attempt with attempts left waits `retryDelay(n)`
 * (doubling) and is dispatched again. The run SUCCEEDS when the last leg succeeds and FAILS when
 * a leg runs out of attempts, fails permanently, or the run is ABORTed (the thing left
 * PROVISIONED meanwhile). Pure: time comes in events (`at`); the saga's jobs act on what this
 * machine decides (the `due` leg to dispatch, the RUNNING leg to time out).
 */
export type LegName = 'identify' | 'provision';
export type LegState = 'PENDING' | 'RUNNING' | 'SUCCEEDED' | 'FAILED';

export interface LegAttempt {
  attempt: number;
  dispatched_at: string;
  ended_at: string | null;
  outcome: 'SUCCEEDED' | 'FAILED' | 'TIMED_OUT' | null;
  error: string | null;
}

export interface Leg {
  name: LegName;
  /** the factory service the leg calls */
  factory_service_id: string;
  state: LegState;
  /** attempts made so far */
  attempts: number;
  /** when a PENDING leg is to be dispatched */
  due: string | null;
  started_at: string | null;
  finished_at: string | null;
  error: string | null;
  /** what the backend reported with its SUCCEEDED result (free-form JSON object) */
  result: Record<string, unknown> | null;
  history: LegAttempt[];
}

/** The thing as the backend is told about it. */
export interface RunThing { model: string; modelId: string; manufacturer: string; serial: string }

export interface ProvisioningRunInput {
  id: string;
  accountId: string;
  thingId: string;
  thing: RunThing;
  legs: { name: LegName; factoryServiceId: string }[];
  maxAttempts: number;
  /** seconds before the second attempt; doubled for each further one */
  retrySeconds: number;
  at: string;
  by: string;
}

export interface ProvisioningRunContext {
  id: string;
  accountId: string;
  thingId: string;
  thing: RunThing;
  maxAttempts: number;
  retrySeconds: number;
  legs: Leg[];
  startedAt: string;
  startedBy: string;
  finishedAt: string | null;
  error: string | null;
}

export type ProvisioningRunEvent =
  | { type: 'DISPATCH'; leg: LegName; attempt: number; at: string }
  | { type: 'RESULT'; leg: LegName; outcome: 'SUCCEEDED' | 'FAILED'; at: string; detail?: string; retryable?: boolean; result?: Record<string, unknown>; attempt?: number }
  /** the call to the backend failed (network, TLS, non-2xx); `permanent`: retrying cannot help */
  | { type: 'ATTEMPT_FAILED'; leg: LegName; attempt: number; at: string; error: string; permanent?: boolean }
  | { type: 'TIMEOUT'; leg: LegName; attempt: number; at: string }
  | { type: 'ABORT'; at: string; reason: string };

const MAX_RETRY_SECONDS = 3600;

/** When attempt `next` (2, 3, ...) is due after a failure at `at`. */
export function retryDue(at: string, retrySeconds: number, next: number): string {
  const delay = Math.min(MAX_RETRY_SECONDS, retrySeconds * 2 ** Math.max(0, next - 2));
  return new Date(Date.parse(at) + delay * 1000).toISOString();
}

type Ctx = { context: ProvisioningRunContext };
type E = ProvisioningRunEvent;

const current = (c: ProvisioningRunContext): Leg | undefined => c.legs.find((l) => l.state === 'PENDING' || l.state === 'RUNNING');
const isCurrent = (c: ProvisioningRunContext, leg: LegName) => current(c)?.name === leg;

/** The leg after `leg` ended: replaced in the list with the changes. */
function withLeg(c: ProvisioningRunContext, name: LegName, change: (l: Leg) => Leg): Leg[] {
  return c.legs.map((l) => (l.name === name ? change(l) : l));
}

function endAttempt(l: Leg, at: string, outcome: LegAttempt['outcome'], error: string | null): LegAttempt[] {
  return l.history.map((h) => (h.attempt === l.attempts && h.ended_at === null ? { ...h, ended_at: at, outcome, error } : h));
}

/** An attempt failed (call, report or timeout): retry when attempts are left, else the leg fails. */
function failAttempt(c: ProvisioningRunContext, name: LegName, at: string, error: string, outcome: 'FAILED' | 'TIMED_OUT', permanent: boolean): Leg[] {
  return withLeg(c, name, (l) => {
    const history = endAttempt(l, at, outcome, error);
    if (!permanent && l.attempts < c.maxAttempts) return { ...l, state: 'PENDING', due: retryDue(at, c.retrySeconds, l.attempts + 1), error, history };
    return { ...l, state: 'FAILED', due: null, finished_at: at, error, history };
  });
}

export const provisioningRunMachine = setup({
  types: {
    context: {} as ProvisioningRunContext,
    input: {} as ProvisioningRunInput,
    events: {} as ProvisioningRunEvent,
    emitted: {} as
      | { type: 'provisioningRun.started'; runId: string; thingId: string; legs: LegName[]; at: string }
      | { type: 'provisioningRun.legEnded'; runId: string; thingId: string; leg: LegName; outcome: string; attempt: number; error: string | null; at: string }
      | { type: 'provisioningRun.finished'; runId: string; thingId: string; outcome: 'SUCCEEDED' | 'FAILED'; error: string | null; at: string },
  },
  guards: {
    /** DISPATCH: the current leg, PENDING, and exactly its next attempt (a duplicate job is refused) */
    canDispatch: ({ context, event }: Ctx & { event: E }) => {
      if (event.type !== 'DISPATCH') return false;
      const l = current(context);
      return l?.name === event.leg && l.state === 'PENDING' && event.attempt === l.attempts + 1;
    },
    /** RESULT: the current leg is RUNNING (and the report is not of an older attempt) */
    canReport: ({ context, event }: Ctx & { event: E }) => {
      if (event.type !== 'RESULT' || !isCurrent(context, event.leg)) return false;
      const l = current(context)!;
      return l.state === 'RUNNING' && (event.attempt === undefined || event.attempt === l.attempts);
    },
    /** ATTEMPT_FAILED, TIMEOUT: that attempt of the current leg is still RUNNING */
    attemptRunning: ({ context, event }: Ctx & { event: E }) => {
      if ((event.type !== 'ATTEMPT_FAILED' && event.type !== 'TIMEOUT') || !isCurrent(context, event.leg)) return false;
      const l = current(context)!;
      return l.state === 'RUNNING' && l.attempts === event.attempt;
    },
    allDone: ({ context }: Ctx) => context.legs.every((l) => l.state === 'SUCCEEDED'),
    anyFailed: ({ context }: Ctx) => context.legs.some((l) => l.state === 'FAILED'),
  },
  actions: {
    legEnded: enqueueActions(({ context, event, enqueue }) => {
      if (event.type === 'DISPATCH' || event.type === 'ABORT') return;
      const l = context.legs.find((x) => x.name === event.leg)!;
      const last = l.history[l.history.length - 1];
      enqueue.emit({ type: 'provisioningRun.legEnded' as const, runId: context.id, thingId: context.thingId, leg: l.name, outcome: last?.outcome ?? l.state, attempt: l.attempts, error: last?.error ?? null, at: event.at });
    }),
    finished: enqueueActions(({ context, event, enqueue }, params: { outcome: 'SUCCEEDED' | 'FAILED' }) => {
      const failed = context.legs.find((l) => l.state === 'FAILED');
      const error = event.type === 'ABORT' ? event.reason : failed ? `leg ${failed.name} failed: ${failed.error}` : null;
      enqueue.assign({ finishedAt: event.at, error });
      enqueue.emit({ type: 'provisioningRun.finished' as const, runId: context.id, thingId: context.thingId, outcome: params.outcome, error, at: event.at });
    }),
  },
}).createMachine({
  id: 'provisioningRun',
  context: ({ input }) => ({
    id: input.id, accountId: input.accountId, thingId: input.thingId, thing: input.thing, maxAttempts: input.maxAttempts, retrySeconds: input.retrySeconds,
    legs: input.legs.map((l, i) => ({
      name: l.name, factory_service_id: l.factoryServiceId, state: 'PENDING' as const, attempts: 0, due: i === 0 ? input.at : null,
      started_at: null, finished_at: null, error: null, result: null, history: [],
    })),
    startedAt: input.at, startedBy: input.by, finishedAt: null, error: null,
  }),
  entry: emit(({ context }) => ({ type: 'provisioningRun.started' as const, runId: context.id, thingId: context.thingId, legs: context.legs.map((l) => l.name), at: context.startedAt })),
  initial: 'RUNNING',
  states: {
    RUNNING: {
      always: [
        { guard: 'anyFailed', target: 'FAILED', actions: { type: 'finished', params: { outcome: 'FAILED' } } },
        { guard: 'allDone', target: 'SUCCEEDED', actions: { type: 'finished', params: { outcome: 'SUCCEEDED' } } },
      ],
      on: {
        DISPATCH: {
          guard: 'canDispatch',
          actions: assign({
            legs: ({ context, event }) => withLeg(context, (event as Extract<E, { type: 'DISPATCH' }>).leg, (l) => ({
              ...l, state: 'RUNNING', attempts: l.attempts + 1, due: null, started_at: l.started_at ?? event.at,
              history: [...l.history, { attempt: l.attempts + 1, dispatched_at: event.at, ended_at: null, outcome: null, error: null }],
            })),
          }),
        },
        RESULT: {
          guard: 'canReport',
          actions: [
            assign({
              legs: ({ context, event }) => {
                const e = event as Extract<E, { type: 'RESULT' }>;
                if (e.outcome === 'FAILED') return failAttempt(context, e.leg, e.at, e.detail ?? 'the factory backend reported a failure', 'FAILED', e.retryable === false);
                const legs = withLeg(context, e.leg, (l) => ({ ...l, state: 'SUCCEEDED', due: null, finished_at: e.at, error: null, result: e.result ?? null, history: endAttempt(l, e.at, 'SUCCEEDED', null) }));
                // the next leg is due now
                const next = legs.findIndex((l) => l.state === 'PENDING');
                return next === -1 ? legs : legs.map((l, i) => (i === next ? { ...l, due: e.at } : l));
              },
            }),
            'legEnded',
          ],
        },
        ATTEMPT_FAILED: {
          guard: 'attemptRunning',
          actions: [
            assign({ legs: ({ context, event }) => { const e = event as Extract<E, { type: 'ATTEMPT_FAILED' }>; return failAttempt(context, e.leg, e.at, e.error, 'FAILED', e.permanent === true); } }),
            'legEnded',
          ],
        },
        TIMEOUT: {
          guard: 'attemptRunning',
          actions: [
            assign({ legs: ({ context, event }) => failAttempt(context, (event as Extract<E, { type: 'TIMEOUT' }>).leg, event.at, 'no provisioning-result within the leg timeout', 'TIMED_OUT', false) }),
            'legEnded',
          ],
        },
        ABORT: {
          target: 'FAILED',
          actions: [
            assign({
              legs: ({ context, event }) => context.legs.map((l) => (l.state === 'PENDING' || l.state === 'RUNNING'
                ? { ...l, state: 'FAILED' as const, due: null, finished_at: event.at, error: (event as Extract<E, { type: 'ABORT' }>).reason, history: endAttempt(l, event.at, 'FAILED', (event as Extract<E, { type: 'ABORT' }>).reason) }
                : l)),
            }),
            { type: 'finished', params: { outcome: 'FAILED' } },
          ],
        },
      },
    },
    SUCCEEDED: { type: 'final' },
    FAILED: { type: 'final' },
  },
});
