import { assign, emit, setup } from 'xstate';

/**
 * Ingest bulk job (spec document 3 names only COMPLETED_WITH_ERRORS; the rest is recorded in
 * docs/decisions.md): QUEUED -> START -> RUNNING -> FINISH -> COMPLETED, or
 * COMPLETED_WITH_ERRORS when some items were quarantined or rejected. A worker that resumes a
 * job after a crash finds it RUNNING and goes on from its checkpoint (START is not accepted
 * twice). Pure: time comes as `at`.
 */
export interface IngestJobInput {
  id: string;
  accountId: string;
  warehouseId: string;
  resource: string;
  mode: 'DELTA' | 'FULL_REFRESH';
  totalItems: number;
  createdAt: string;
}

export interface IngestJobContext extends IngestJobInput {
  startedAt: string | null;
  completedAt: string | null;
  errors: number;
}

export type IngestJobEvent =
  | { type: 'START'; at: string }
  /** `errors`: items quarantined or rejected */
  | { type: 'FINISH'; at: string; errors: number };

type Emitted = { type: 'ingestJob.completed'; jobId: string; accountId: string; state: 'COMPLETED' | 'COMPLETED_WITH_ERRORS'; errors: number };

export const ingestJobMachine = setup({
  types: {
    context: {} as IngestJobContext,
    input: {} as IngestJobInput,
    events: {} as IngestJobEvent,
    emitted: {} as Emitted,
  },
  actions: {
    finish: assign({
      completedAt: ({ event }) => event.at,
      errors: ({ event }) => (event.type === 'FINISH' ? event.errors : 0),
    }),
    announce: emit(({ context }) => ({
      type: 'ingestJob.completed' as const,
      jobId: context.id,
      accountId: context.accountId,
      state: context.errors > 0 ? ('COMPLETED_WITH_ERRORS' as const) : ('COMPLETED' as const),
      errors: context.errors,
    })),
  },
  guards: {
    hadErrors: ({ event }) => event.type === 'FINISH' && event.errors > 0,
  },
}).createMachine({
  id: 'ingestJob',
  context: ({ input }) => ({ ...input, startedAt: null, completedAt: null, errors: 0 }),
  initial: 'QUEUED',
  states: {
    QUEUED: {
      on: { START: { target: 'RUNNING', actions: assign({ startedAt: ({ event }) => event.at }) } },
    },
    RUNNING: {
      on: {
        FINISH: [
          { guard: 'hadErrors', target: 'COMPLETED_WITH_ERRORS', actions: ['finish', 'announce'] },
          { target: 'COMPLETED', actions: ['finish', 'announce'] },
        ],
      },
    },
    COMPLETED: { type: 'final' },
    COMPLETED_WITH_ERRORS: { type: 'final' },
  },
});

export type IngestJobState = 'QUEUED' | 'RUNNING' | 'COMPLETED' | 'COMPLETED_WITH_ERRORS';
export const INGEST_JOB_STATES: readonly IngestJobState[] = ['QUEUED', 'RUNNING', 'COMPLETED', 'COMPLETED_WITH_ERRORS'];
