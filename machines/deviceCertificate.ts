import { setup, assign } from 'xstate';

/**
 * A device certificate (the `device_certificates` row, actor id = its serial). An enrollment's
 * certificate is born in use; a renewal's (src/trust/rotation.ts) is born `issued` and waits for
 * its first use (broker CONNECT or the device-cert HTTP scheme): FIRST_USE puts it in use, and the
 * rotation then SUPERSEDEs every other live certificate of the thing. REVOKE (the thing is revoked
 * or annihilated) ends a live certificate. Superseded and revoked certificates are on the CRL.
 * AUTHENTICATE is asked (`can`), never sent: may the certificate authenticate its device at `at`
 * (live and not past `notAfter`). Time comes in events (`at`); the machine holds no clock.
 */
export interface DeviceCertificateContext {
  serial: string;
  thingId: string;
  issuedAt: string;
  notAfter: string;
  /** a renewal: waits for its first use before it supersedes the thing's other certificates */
  renewal: boolean;
  usedAt?: string;
  revokedAt?: string;
  /** the renewal whose first use superseded this certificate */
  supersededBy?: string;
}

export type DeviceCertificateInput = Pick<DeviceCertificateContext, 'serial' | 'thingId' | 'issuedAt' | 'notAfter' | 'renewal'>;

export type DeviceCertificateEvent =
  | { type: 'FIRST_USE'; at: string }
  | { type: 'SUPERSEDE'; at: string; by: string }
  | { type: 'REVOKE'; at: string }
  | { type: 'AUTHENTICATE'; at: string };

export type DeviceCertificateState = 'issued' | 'inUse' | 'superseded' | 'revoked';

/** The states whose certificate is on the CRL. */
export const REVOKED_CERTIFICATE_STATES: ReadonlySet<string> = new Set<DeviceCertificateState>(['superseded', 'revoked']);

const valid = ({ context, event }: { context: DeviceCertificateContext; event: DeviceCertificateEvent }) => Date.parse(event.at) < Date.parse(context.notAfter);

/** A live certificate's endings (issued and in use alike). */
const ending = {
  SUPERSEDE: { target: 'superseded' as const, actions: 'supersede' as const },
  REVOKE: { target: 'revoked' as const, actions: 'revoke' as const },
};

export const deviceCertificateMachine = setup({
  types: {
    context: {} as DeviceCertificateContext,
    input: {} as DeviceCertificateInput,
    events: {} as DeviceCertificateEvent,
  },
  guards: { valid, inUseAtBirth: ({ context }) => !context.renewal },
  actions: {
    supersede: assign({ revokedAt: ({ event }) => event.at, supersededBy: ({ event }) => (event.type === 'SUPERSEDE' ? event.by : undefined) }),
    revoke: assign({ revokedAt: ({ event }) => event.at }),
  },
}).createMachine({
  id: 'deviceCertificate',
  context: ({ input }) => ({ ...input }),
  initial: 'issued',
  states: {
    issued: {
      // an enrollment's certificate is the thing's only one: in use from its birth
      always: { guard: 'inUseAtBirth', target: 'inUse' },
      on: {
        FIRST_USE: { target: 'inUse', actions: assign({ usedAt: ({ event }) => event.at }) },
        ...ending,
        // a target, so that `can` sees a transition (asked, never sent)
        AUTHENTICATE: { guard: 'valid', target: 'issued' },
      },
    },
    inUse: {
      on: { ...ending, AUTHENTICATE: { guard: 'valid', target: 'inUse' } },
    },
    superseded: { type: 'final' },
    revoked: { type: 'final' },
  },
});
