import { setup, assign, emit } from 'xstate';

/**
 * A device license decision (the `device_licenses` row). Automatic decisions are born decided
 * (granted, or denied with the reason); under a model's 'manual' approval a request is born
 * pending, announced (license.requested), and decided once by the tenant: GRANT while its thing
 * is not revoked, DENY (also what revocation sends). A granted license is valid LICENSE_DAYS from
 * its decision; RENEW (asked, never sent: `can`) says whether it may still be renewed at `at`.
 */
export const LICENSE_DAYS = 30;

/** The expiry of a license granted at `at` (ISO). */
export const licenseExpiry = (at: string) => new Date(Date.parse(at) + LICENSE_DAYS * 86_400_000).toISOString();

export interface LicenseContext {
  id: string;
  thingId: string;
  accountId: string;
  serial: string;
  kind: 'request' | 'renew';
  features: string[];
  requestedAt: string;
  decidedAt?: string;
  /** principal sub of a tenant's decision; absent for automatic ones */
  decidedBy?: string;
  expiresAt?: string;
  reason?: string;
}

export interface LicenseInput extends Omit<LicenseContext, 'decidedAt' | 'decidedBy' | 'expiresAt' | 'reason'> {
  /** an automatic decision, taken at `requestedAt`; absent: pending for the tenant */
  decided?: { decision: 'granted' } | { decision: 'denied'; reason: string };
}

export type LicenseEvent =
  | { type: 'GRANT'; at: string; by: string; thingRevoked: boolean }
  | { type: 'DENY'; at: string; by: string; reason: string }
  | { type: 'RENEW'; at: string };

export const licenseMachine = setup({
  types: {
    context: {} as LicenseContext,
    input: {} as LicenseInput,
    events: {} as LicenseEvent,
    emitted: {} as { type: 'license.requested'; licenseId: string; thingId: string; serial: string; features: string[] },
  },
}).createMachine({
  id: 'license',
  context: ({ input: { decided, ...rest } }) => ({
    ...rest,
    ...(decided?.decision === 'granted' ? { decidedAt: rest.requestedAt, expiresAt: licenseExpiry(rest.requestedAt) } : {}),
    ...(decided?.decision === 'denied' ? { decidedAt: rest.requestedAt, reason: decided.reason } : {}),
  }),
  initial: 'born',
  states: {
    born: {
      always: [
        { guard: ({ context }) => context.expiresAt !== undefined, target: 'granted' },
        { guard: ({ context }) => context.reason !== undefined, target: 'denied' },
        { target: 'pending' },
      ],
    },
    pending: {
      entry: emit(({ context }) => ({ type: 'license.requested' as const, licenseId: context.id, thingId: context.thingId, serial: context.serial, features: context.features })),
      on: {
        GRANT: {
          // a revoked thing's request can only be denied
          guard: ({ event }) => !event.thingRevoked,
          target: 'granted',
          actions: assign({ decidedAt: ({ event }) => event.at, decidedBy: ({ event }) => event.by, expiresAt: ({ event }) => licenseExpiry(event.at) }),
        },
        DENY: {
          target: 'denied',
          actions: assign({ decidedAt: ({ event }) => event.at, decidedBy: ({ event }) => event.by, reason: ({ event }) => event.reason }),
        },
      },
    },
    granted: {
      // a target, so that `can` sees a transition (XState's can() ignores ones that do nothing)
      on: { RENEW: { guard: ({ context, event }) => Date.parse(event.at) < Date.parse(context.expiresAt!), target: 'granted' } },
    },
    denied: { type: 'final' },
  },
});
