import { assign, emit, enqueueActions, setup } from 'xstate';

/**
 * A PROVISION saga run (spec document 2: POST /api/v1/things/{id}/provision starts it; the factory
 * backend reports each leg through the provisioning-result webhook). The legs run one after
 * another, in order (`identify` when the model has an identify-role factory service, then
 * `provision`). Each leg is attempted up to `maxAttempts` times: an attempt is DISPATCHed (the
 * gateway calls the backend), then ends with the backend's RESULT, a failed call
 * (ATTEMPT_FAILED) or a TIMEOUT; a failed attempt with attempts left waits `retryDelay(n)`
 * (doubling) and is dispatched again. The run ENDS when the last leg succeeds, or when a leg runs
 * out of attempts, fails permanently, or the run is ABORTed (the thing left PROVISIONED
 * meanwhile); once the thing has moved (IN_FACTORY, or back to ROLLEDOFF: THING_DONE) the run is
 * SUCCEEDED or FAILED. Pure: time comes in events (`at`). `nextStep` says which step is due and
 * when (a leg to dispatch, an attempt to time out, the thing to move); the saga's one job kind
 * carries it out at that time.
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
  /** how long a dispatched attempt waits for its result */
  timeoutSeconds: number;
  at: string;
  by: string;
}

/** How the legs ended, while the thing is being moved (state ENDING). */
export interface RunEnding { outcome: 'SUCCEEDED' | 'FAILED'; error: string | null; at: string }

export interface ProvisioningRunContext {
  id: string;
  accountId: string;
  thingId: string;
  thing: RunThing;
  maxAttempts: number;
  retrySeconds: number;
  /** absent in runs started before it was recorded (DEFAULT_TIMEOUT_SECONDS) */
  timeoutSeconds?: number;
  legs: Leg[];
  /** set when the legs ended; null (absent in older runs) before */
  ending?: RunEnding | null;
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
  | { type: 'ABORT'; at: string; reason: string }
  /** the thing moved as the run ended (or had moved on already): the run is finished */
  | { type: 'THING_DONE'; at: string };

const MAX_RETRY_SECONDS = 3600;
/** The leg timeout of runs that did not record theirs (PROVISION_LEG_TIMEOUT_SECONDS' default). */
const DEFAULT_TIMEOUT_SECONDS = 600;

const addSeconds = (at: string, seconds: number) => new Date(Date.parse(at) + seconds * 1000).toISOString();

/** When attempt `next` (2, 3, ...) is due after a failure at `at`. */
export function retryDue(at: string, retrySeconds: number, next: number): string {
  return addSeconds(at, Math.min(MAX_RETRY_SECONDS, retrySeconds * 2 ** Math.max(0, next - 2)));
}

/** A step of the run that no request drives, and when it is due. */
export type SagaStep =
  /** the PENDING leg's next attempt, at its `due` time */
  | { step: 'DISPATCH'; leg: LegName; attempt: number; at: string }
  /** the RUNNING attempt, when its timeout has passed */
  | { step: 'TIMEOUT'; leg: LegName; attempt: number; at: string }
  /** the legs ended: the thing is to move (IN_FACTORY, or back to ROLLEDOFF) */
  | { step: 'END'; outcome: 'SUCCEEDED' | 'FAILED'; at: string };

/** What the run waits for next, and from when; undefined once it is finished. */
export function nextStep(c: ProvisioningRunContext): SagaStep | undefined {
  if (c.finishedAt !== null) return undefined;
  if (c.ending) return { step: 'END', outcome: c.ending.outcome, at: c.ending.at };
  const l = current(c);
  if (!l) return undefined;
  if (l.state === 'PENDING') return l.due ? { step: 'DISPATCH', leg: l.name, attempt: l.attempts + 1, at: l.due } : undefined;
  const dispatchedAt = l.history[l.history.length - 1]?.dispatched_at ?? l.started_at ?? c.startedAt;
  return { step: 'TIMEOUT', leg: l.name, attempt: l.attempts, at: addSeconds(dispatchedAt, c.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS) };
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
    endsSucceeded: ({ context }: Ctx) => context.ending?.outcome === 'SUCCEEDED',
  },
  actions: {
    legEnded: enqueueActions(({ context, event, enqueue }) => {
      if (event.type === 'DISPATCH' || event.type === 'ABORT' || event.type === 'THING_DONE') return;
      const l = context.legs.find((x) => x.name === event.leg)!;
      const last = l.history[l.history.length - 1];
      enqueue.emit({ type: 'provisioningRun.legEnded' as const, runId: context.id, thingId: context.thingId, leg: l.name, outcome: last?.outcome ?? l.state, attempt: l.attempts, error: last?.error ?? null, at: event.at });
    }),
    /** the legs ended: kept until the thing has moved */
    ending: assign({
      ending: ({ context, event }, params: { outcome: 'SUCCEEDED' | 'FAILED' }) => {
        const failed = context.legs.find((l) => l.state === 'FAILED');
        const error = event.type === 'ABORT' ? event.reason : failed ? `leg ${failed.name} failed: ${failed.error}` : null;
        return { outcome: params.outcome, error, at: event.at };
      },
    }),
    finished: enqueueActions(({ context, event, enqueue }) => {
      const { outcome, error } = context.ending!;
      enqueue.assign({ finishedAt: event.at, error });
      enqueue.emit({ type: 'provisioningRun.finished' as const, runId: context.id, thingId: context.thingId, outcome, error, at: event.at });
    }),
  },
}).createMachine({
  id: 'provisioningRun',
  context: ({ input }) => ({
    id: input.id, accountId: input.accountId, thingId: input.thingId, thing: input.thing, maxAttempts: input.maxAttempts, retrySeconds: input.retrySeconds,
    timeoutSeconds: input.timeoutSeconds, ending: null,
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
        { guard: 'anyFailed', target: 'ENDING', actions: { type: 'ending', params: { outcome: 'FAILED' } } },
        { guard: 'allDone', target: 'ENDING', actions: { type: 'ending', params: { outcome: 'SUCCEEDED' } } },
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
          target: 'ENDING',
          actions: [
            assign({
              legs: ({ context, event }) => context.legs.map((l) => (l.state === 'PENDING' || l.state === 'RUNNING'
                ? { ...l, state: 'FAILED' as const, due: null, finished_at: event.at, error: (event as Extract<E, { type: 'ABORT' }>).reason, history: endAttempt(l, event.at, 'FAILED', (event as Extract<E, { type: 'ABORT' }>).reason) }
                : l)),
            }),
            { type: 'ending', params: { outcome: 'FAILED' } },
          ],
        },
      },
    },
    /** the legs ended; the run finishes once the thing has moved (projected as RUNNING until then) */
    ENDING: {
      on: {
        THING_DONE: [
          { guard: 'endsSucceeded', target: 'SUCCEEDED', actions: 'finished' },
          { target: 'FAILED', actions: 'finished' },
        ],
      },
    },
    SUCCEEDED: { type: 'final' },
    FAILED: { type: 'final' },
  },
});
