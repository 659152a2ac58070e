import { assign, emit, setup } from 'xstate';

/**
 * A device command with a time to live (issue 18, offline commands):
 * pending -> DELIVER -> delivered -> RESPOND -> succeeded | failed; pending or delivered ->
 * EXPIRE -> expired once `expiresAt` has passed; pending -> CANCEL -> cancelled (a delivered
 * command cannot be taken back). DELIVER is refused once the TTL has passed (the
 * command is then expired instead, never sent), EXPIRE before it. Pure: time comes as `at`.
 */
export interface DeviceCommandInput {
  id: string;
  accountId: string;
  thingId: string;
  name: string;
  createdAt: string;
  expiresAt: string;
}

export interface DeviceCommandContext extends DeviceCommandInput {
  deliveredAt: string | null;
  completedAt: string | null;
  response: unknown;
}

export type DeviceCommandEvent =
  | { type: 'DELIVER'; at: string }
  /** the device's reply; `ok` false when the reply says the command failed */
  | { type: 'RESPOND'; at: string; ok: boolean; response: unknown }
  | { type: 'EXPIRE'; at: string }
  /** a tenant withdraws a command the device has not received */
  | { type: 'CANCEL'; at: string };

export type DeviceCommandStatus = 'pending' | 'delivered' | 'succeeded' | 'failed' | 'expired' | 'cancelled';
export const DEVICE_COMMAND_STATUSES: readonly DeviceCommandStatus[] = ['pending', 'delivered', 'succeeded', 'failed', 'expired', 'cancelled'];

type Emitted = { type: 'deviceCommand.completed'; commandId: string; thingId: string; status: 'succeeded' | 'failed' | 'expired' | 'cancelled' };

const before = (at: string, limit: string) => Date.parse(at) < Date.parse(limit);

export const deviceCommandMachine = setup({
  types: {
    context: {} as DeviceCommandContext,
    input: {} as DeviceCommandInput,
    events: {} as DeviceCommandEvent,
    emitted: {} as Emitted,
  },
  guards: {
    alive: ({ context, event }) => before(event.at, context.expiresAt),
    lapsed: ({ context, event }) => !before(event.at, context.expiresAt),
    ok: ({ event }) => event.type === 'RESPOND' && event.ok,
  },
  actions: {
    reply: assign({
      completedAt: ({ event }) => event.at,
      response: ({ event }) => (event.type === 'RESPOND' ? event.response : null),
    }),
    close: assign({ completedAt: ({ event }) => event.at }),
    announce: emit(({ context }, params: { status: Emitted['status'] }) => ({
      type: 'deviceCommand.completed' as const, commandId: context.id, thingId: context.thingId, status: params.status,
    })),
  },
}).createMachine({
  id: 'deviceCommand',
  context: ({ input }) => ({ ...input, deliveredAt: null, completedAt: null, response: null }),
  initial: 'pending',
  states: {
    pending: {
      on: {
        DELIVER: { guard: 'alive', target: 'delivered', actions: assign({ deliveredAt: ({ event }) => event.at }) },
        EXPIRE: { guard: 'lapsed', target: 'expired', actions: ['close', { type: 'announce', params: { status: 'expired' } }] },
        CANCEL: { target: 'cancelled', actions: ['close', { type: 'announce', params: { status: 'cancelled' } }] },
      },
    },
    delivered: {
      on: {
        RESPOND: [
          { guard: 'ok', target: 'succeeded', actions: ['reply', { type: 'announce', params: { status: 'succeeded' } }] },
          { target: 'failed', actions: ['reply', { type: 'announce', params: { status: 'failed' } }] },
        ],
        EXPIRE: { guard: 'lapsed', target: 'expired', actions: ['close', { type: 'announce', params: { status: 'expired' } }] },
      },
    },
    succeeded: { type: 'final' },
    failed: { type: 'final' },
    expired: { type: 'final' },
    cancelled: { type: 'final' },
  },
});
