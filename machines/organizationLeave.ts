import { setup, assign, emit } from 'xstate';

/**
 * The leave saga of one account leaving (or being removed from) an organization (spec rules 3-6).
 *
 *   started --(no elevated quota)--> departing --DEPARTED--> departed            (rule 3)
 *   started --(elevated quotas)----> seeding --SEEDED--> awaitingDecisions       (rule 4)
 *   awaitingDecisions --DECIDED x N, all approved--> departing --DEPARTED--> departed (rule 5)
 *   awaitingDecisions --DECIDED denied--> blocking --UNBLOCKED--> blocked            (rule 6)
 *
 * Each arrow is one transaction of the service; the states `seeding`, `departing` and `blocking`
 * are durable "step to do" markers that a job (or the start-up sweep) drives to the next state,
 * so a crash between two steps resumes. Pure: no I/O, time in events.
 */
export interface ElevatedQuota {
  serviceCode: string;
  quotaCode: string;
  /** the organization's applied value the leaving account asks to keep */
  value: number;
}

export type LeaveDecision = 'approved' | 'denied';

export interface OrganizationLeaveContext {
  id: string;
  organizationId: string;
  accountId: string;
  /** `leave` when the account's admin left, `remove` when the management account removed it */
  initiatedAs: 'leave' | 'remove';
  initiatedBy: string;
  elevated: ElevatedQuota[];
  requestIds: string[];
  decisions: Record<string, LeaveDecision>;
  denialReasons: string[];
  startedAt: string;
  finishedAt: string | null;
}

export type OrganizationLeaveInput = Pick<OrganizationLeaveContext, 'id' | 'organizationId' | 'accountId' | 'initiatedAs' | 'initiatedBy' | 'elevated' | 'startedAt'>;

export type OrganizationLeaveEvent =
  | { type: 'SEEDED'; at: string; requestIds: string[] }
  | { type: 'DECIDED'; at: string; requestId: string; decision: LeaveDecision; reason?: string }
  | { type: 'DEPARTED'; at: string }
  | { type: 'UNBLOCKED'; at: string };

const denied = (c: OrganizationLeaveContext) => Object.entries(c.decisions).filter(([, d]) => d === 'denied').map(([id]) => id);

export const organizationLeaveMachine = setup({
  types: {
    context: {} as OrganizationLeaveContext,
    input: {} as OrganizationLeaveInput,
    events: {} as OrganizationLeaveEvent,
    emitted: {} as
      | { type: 'organization.leaveStarted'; leaveId: string; organizationId: string; accountId: string; gated: boolean }
      | { type: 'organization.leaveBlocked'; leaveId: string; organizationId: string; accountId: string; deniedRequestIds: string[]; reason: string }
      | { type: 'organization.memberDeparted'; leaveId: string; organizationId: string; accountId: string; keptValues: ElevatedQuota[] },
  },
  guards: {
    gated: ({ context }) => context.elevated.length > 0,
    seededAll: ({ context, event }) => event.type === 'SEEDED' && event.requestIds.length === context.elevated.length,
    undecidedRequest: ({ context, event }) =>
      event.type === 'DECIDED' && context.requestIds.includes(event.requestId) && context.decisions[event.requestId] === undefined,
    anyDenied: ({ context }) => denied(context).length > 0,
    allApproved: ({ context }) => context.requestIds.length > 0 && context.requestIds.every((id) => context.decisions[id] === 'approved'),
  },
}).createMachine({
  id: 'organizationLeave',
  context: ({ input }) => ({ ...input, requestIds: [], decisions: {}, denialReasons: [], finishedAt: null }),
  initial: 'started',
  entry: emit(({ context }) => ({
    type: 'organization.leaveStarted' as const, leaveId: context.id, organizationId: context.organizationId, accountId: context.accountId, gated: context.elevated.length > 0,
  })),
  states: {
    started: {
      always: [{ guard: 'gated', target: 'seeding' }, { target: 'departing' }],
    },
    seeding: {
      on: { SEEDED: { guard: 'seededAll', target: 'awaitingDecisions', actions: assign({ requestIds: ({ event }) => event.requestIds }) } },
    },
    awaitingDecisions: {
      always: [
        { guard: 'anyDenied', target: 'blocking' },
        { guard: 'allApproved', target: 'departing' },
      ],
      on: {
        DECIDED: {
          guard: 'undecidedRequest',
          actions: assign({
            decisions: ({ context, event }) => ({ ...context.decisions, [event.requestId]: event.decision }),
            denialReasons: ({ context, event }) => (event.decision === 'denied' && event.reason ? [...context.denialReasons, event.reason] : context.denialReasons),
          }),
        },
      },
    },
    departing: {
      on: { DEPARTED: { target: 'departed', actions: assign({ finishedAt: ({ event }) => event.at }) } },
    },
    blocking: {
      on: { UNBLOCKED: { target: 'blocked', actions: assign({ finishedAt: ({ event }) => event.at }) } },
    },
    departed: {
      type: 'final',
      entry: emit(({ context }) => ({
        type: 'organization.memberDeparted' as const, leaveId: context.id, organizationId: context.organizationId, accountId: context.accountId,
        keptValues: context.requestIds.length ? context.elevated : [],
      })),
    },
    blocked: {
      type: 'final',
      entry: emit(({ context }) => ({
        type: 'organization.leaveBlocked' as const,
        leaveId: context.id,
        organizationId: context.organizationId,
        accountId: context.accountId,
        deniedRequestIds: denied(context),
        reason: `leave blocked: quota increase request${denied(context).length > 1 ? 's' : ''} denied${context.denialReasons.length ? `: ${context.denialReasons.join('; ')}` : ''}`,
      })),
    },
  },
});
