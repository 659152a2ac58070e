import { setup, assign, emit } from 'xstate';

/**
 * Enrollment token of a registered thing (POST /api/v1/things): single use, valid until
 * `expiresAt`. issued -> used (the device enrolled with it) | expired (its TTL passed before use).
 * AUTHENTICATE is asked (`can`), never sent: the token authenticates its device until `expiresAt`,
 * used or not (the device plane before its certificate). Time comes in events (`at`, ISO 8601)
 * from the caller's clock; the machine holds none.
 */
export interface EnrollmentTokenContext {
  thingId: string;
  accountId: string;
  issuedAt: string;
  expiresAt: string;
  usedAt: string | null;
}

export type EnrollmentTokenInput = Omit<EnrollmentTokenContext, 'usedAt'>;

export type EnrollmentTokenEvent =
  | { type: 'USE'; at: string }
  | { type: 'EXPIRE'; at: string }
  | { type: 'AUTHENTICATE'; at: string };

const isExpired = (context: EnrollmentTokenContext, at: string) => Date.parse(at) >= Date.parse(context.expiresAt);

export const enrollmentTokenMachine = setup({
  types: {
    context: {} as EnrollmentTokenContext,
    input: {} as EnrollmentTokenInput,
    events: {} as EnrollmentTokenEvent,
    emitted: {} as
      | { type: 'enrollmentToken.used'; thingId: string; at: string }
      | { type: 'enrollmentToken.expired'; thingId: string },
  },
  guards: {
    valid: ({ context, event }) => !isExpired(context, event.at),
    ttlPassed: ({ context, event }) => isExpired(context, event.at),
  },
}).createMachine({
  id: 'enrollmentToken',
  context: ({ input }) => ({ ...input, usedAt: null }),
  initial: 'issued',
  states: {
    issued: {
      on: {
        USE: {
          guard: 'valid',
          target: 'used',
          actions: [
            assign({ usedAt: ({ event }) => event.at }),
            emit(({ context, event }) => ({ type: 'enrollmentToken.used' as const, thingId: context.thingId, at: event.at })),
          ],
        },
        EXPIRE: { guard: 'ttlPassed', target: 'expired' },
        // targets, so that `can` sees a transition (asked, never sent)
        AUTHENTICATE: { guard: 'valid', target: 'issued' },
      },
    },
    used: { type: 'final', on: { AUTHENTICATE: { guard: 'valid', target: 'used' } } },
    expired: {
      type: 'final',
      entry: emit(({ context }) => ({ type: 'enrollmentToken.expired' as const, thingId: context.thingId })),
    },
  },
});
