import { setup, assign } from 'xstate';

/**
 * A thing access code (the `thing_access_codes` row): issued by the thing's owner so that another
 * account may join the thing (POST /api/v1/things/join). Single use, before `expiresAt`:
 * issued -> used. A code past its expiry stays issued and refuses USE (nothing sweeps them).
 * Time comes in events (`at`) from the caller's clock; the machine holds none.
 */
export interface AccessCodeContext {
  id: string;
  thingId: string;
  issuedByAccount: string;
  expiresAt: string;
  usedAt?: string;
  usedByAccount?: string;
}

export type AccessCodeInput = Omit<AccessCodeContext, 'usedAt' | 'usedByAccount'>;

export type AccessCodeEvent = { type: 'USE'; at: string; accountId: string };

export const accessCodeMachine = setup({
  types: {
    context: {} as AccessCodeContext,
    input: {} as AccessCodeInput,
    events: {} as AccessCodeEvent,
  },
  guards: { unexpired: ({ context, event }) => Date.parse(event.at) < Date.parse(context.expiresAt) },
}).createMachine({
  id: 'accessCode',
  context: ({ input }) => ({ ...input }),
  initial: 'issued',
  states: {
    issued: {
      on: {
        USE: {
          guard: 'unexpired',
          target: 'used',
          actions: assign({ usedAt: ({ event }) => event.at, usedByAccount: ({ event }) => event.accountId }),
        },
      },
    },
    used: { type: 'final' },
  },
});
