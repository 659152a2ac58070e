import { setup, assign, emit } from 'xstate';

/**
 * A device license decision (the `device_licenses` row). The machine decides a new request at its
 * birth from its grounds: refused (denied with the reason) when the thing is revoked or not
 * enrolled or the service established a refusal; under a model's 'manual' approval a request is
 * born pending, announced (license.requested), and decided once by the tenant: GRANT while its
 * thing is not revoked, DENY (also what revocation sends); otherwise, and for every renewal (the
 * tenant approved once already), granted at once. A granted license is valid LICENSE_DAYS from its
 * decision; RENEW (asked, never sent: `can`) says whether it may still be renewed at `at`.
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

/** What a new request is decided on (at `requestedAt`). */
export type LicenseGrounds =
  /** the thing's standing, as its own and its certificate's machines say, and its model's approval mode */
  | { approval: 'automatic' | 'manual'; thingRevoked: boolean; enrolled: boolean }
  /** a refusal the service established (the license presented for renewal does not verify) */
  | { refusal: string };

export interface LicenseInput extends Omit<LicenseContext, 'decidedAt' | 'decidedBy' | 'expiresAt' | 'reason'> {
  grounds: LicenseGrounds;
}

/** The reason a request is refused at birth, if it is. */
function refusal(grounds: LicenseGrounds): string | undefined {
  if ('refusal' in grounds) return grounds.refusal;
  return grounds.thingRevoked ? 'thing revoked' : !grounds.enrolled ? 'thing not enrolled' : undefined;
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
  context: ({ input: { grounds, ...rest } }) => {
    const reason = refusal(grounds);
    // a refused renewal grants nothing: it records no features
    if (reason !== undefined) return { ...rest, features: rest.kind === 'renew' ? [] : rest.features, decidedAt: rest.requestedAt, reason };
    if ('approval' in grounds && grounds.approval === 'manual' && rest.kind === 'request') return rest;
    return { ...rest, decidedAt: rest.requestedAt, expiresAt: licenseExpiry(rest.requestedAt) };
  },
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
