import type { ActorKind, ActorStore } from '../actors/store.js';
import type { SnapshotFrom } from 'xstate';
import { conflict, refused, type DomainError } from '../lib/errors.js';
import { claimGroupMachine } from '../../machines/claimGroup.js';
import { enrollmentTokenMachine } from '../../machines/enrollmentToken.js';
import { thingMachine } from '../../machines/thing.js';
import { licenseMachine } from '../../machines/license.js';
import { deviceCertificateMachine, REVOKED_CERTIFICATE_STATES } from '../../machines/deviceCertificate.js';
import { accessCodeMachine } from '../../machines/accessCode.js';

/**
 * Claim groups: state, consumed count and expiry shown on the `claim_groups` row (the claim query
 * and the TTL sweep read them), and the settings the list shows (name, cap, TTL).
 */
export const claimGroupKind: ActorKind<typeof claimGroupMachine> = {
  type: 'claimGroup', machine: claimGroupMachine, accountOf: (c) => c.accountId,
  projection: {
    table: 'claim_groups',
    columns: ['state', 'consumed', 'expires_at', 'name', 'max_devices', 'ttl_days'],
    project: ({ context: c }, state) => ({ state, consumed: c.consumed, expires_at: c.expiresAt, name: c.name, max_devices: c.maxDevices, ttl_days: c.ttlDays }),
  },
};

/** Enrollment tokens (actor id = the thing's id): expiry and use shown on the `things` row. */
export const enrollmentTokenKind: ActorKind<typeof enrollmentTokenMachine> = {
  type: 'enrollmentToken', machine: enrollmentTokenMachine, accountOf: (c) => c.accountId,
  projection: {
    table: 'things',
    columns: ['enrollment_token_expires_at', 'enrollment_token_used_at'],
    project: (s) => ({ enrollment_token_expires_at: s.context.expiresAt, enrollment_token_used_at: s.context.usedAt }),
  },
};

/** The thing's owner, enrollment, revocation and lifecycle state are its machine's; the store writes them onto `things`. */
export const thingKind: ActorKind<typeof thingMachine> = {
  type: 'thing', machine: thingMachine, accountOf: (c) => c.accountId,
  projection: {
    table: 'things',
    columns: ['account_id', 'enrolled_by', 'enrolled_at', 'revoked_at', 'lifecycle_state', 'lifecycle_updated_at'],
    project: ({ context }, state) => ({
      account_id: context.accountId, enrolled_by: context.enrolledBy ?? null, enrolled_at: context.enrolledAt ?? null,
      revoked_at: context.revokedAt ?? null, lifecycle_state: state, lifecycle_updated_at: context.stateAt ?? null,
    }),
  },
};

/** Is the thing revoked? Its machine's decision (REVOKE or ANNIHILATE); false for an absent thing. */
export const thingRevoked = (thing: { snapshot: SnapshotFrom<typeof thingMachine> } | undefined): boolean =>
  thing !== undefined && thing.snapshot.context.revokedAt !== undefined;

/**
 * Device certificates (actor id = the serial): the CRL's `revoked`/`revoked_at` and rotation's
 * `awaiting_first_use` on the `device_certificates` row (the CRL, the first-use filter and the
 * registry read them). No domain events: revocation is announced by the thing and the CRL.
 */
export const deviceCertificateKind: ActorKind<typeof deviceCertificateMachine> = {
  type: 'deviceCertificate', machine: deviceCertificateMachine,
  projection: {
    table: 'device_certificates', key: 'serial',
    columns: ['revoked', 'revoked_at', 'awaiting_first_use'],
    project: ({ context }, state) => ({
      revoked: REVOKED_CERTIFICATE_STATES.has(state), revoked_at: context.revokedAt ?? null, awaiting_first_use: state === 'issued',
    }),
  },
};

/** Is the certificate on the CRL (superseded or revoked)? Its machine's state; false when absent. */
export const certificateRevoked = (cert: { state: string } | undefined): boolean => cert !== undefined && REVOKED_CERTIFICATE_STATES.has(cert.state);

/** Thing access codes: their single use shown on the `thing_access_codes` row. */
export const accessCodeKind: ActorKind<typeof accessCodeMachine> = {
  type: 'accessCode', machine: accessCodeMachine, accountOf: (c) => c.issuedByAccount,
  projection: {
    table: 'thing_access_codes',
    columns: ['used_at', 'used_by_account'],
    project: ({ context }) => ({ used_at: context.usedAt ?? null, used_by_account: context.usedByAccount ?? null }),
  },
};

/** A license decision's outcome columns on `device_licenses` (the queue filters on `decision`). */
export const licenseKind: ActorKind<typeof licenseMachine> = {
  type: 'license', machine: licenseMachine, accountOf: (c) => c.accountId,
  projection: {
    table: 'device_licenses',
    columns: ['decision', 'decided_at', 'decided_by', 'expires_at', 'reason'],
    project: ({ context }, state) => ({
      decision: state, decided_at: context.decidedAt ?? null, decided_by: context.decidedBy ?? null,
      expires_at: context.expiresAt ?? null, reason: context.reason ?? null,
    }),
  },
};

/** 409 for a lifecycle event the thing's machine refused, naming its state (and why, when revoked). */
export function thingRefusal(thingId: string, snapshot: SnapshotFrom<typeof thingMachine>, event: string): DomainError {
  const state = String(snapshot.value);
  const revoked = snapshot.context.revokedAt ? ' and revoked' : '';
  return conflict(`thing ${thingId} is ${state}${revoked}: ${event} is not accepted`, { extra: { state, revoked: Boolean(revoked) } });
}

/** A claim group's status is its machine state: active, capped, expired or revoked. */
export type ClaimGroupStatus = 'active' | 'capped' | 'expired' | 'revoked';

/** Why a claim group refused a claim, from the state its machine is in after refusing. */
export function claimRefusal(state: string | undefined): DomainError {
  if (state === 'revoked' || state === 'expired') return refused(`claim group is ${state}`, { extra: { claimGroupStatus: state } });
  if (state === undefined) return refused('claim secret is not valid');
  return refused('claim group is capped: maxDevices reached', { extra: { claimGroupStatus: 'capped' } });
}

/**
 * Lets the machine decide whether the group's TTL has passed at `at` and records the expiry when it
 * has (EXPIRE is only accepted then). Returns the group's state afterwards; undefined when absent.
 */
export async function settleClaimGroup(actors: ActorStore, id: string, at: string): Promise<string | undefined> {
  const current = await actors.get(claimGroupKind, id);
  if (!current || !current.snapshot.can({ type: 'EXPIRE', at })) return current?.state;
  return actors.run(async (uow) => (await uow.trySend(claimGroupKind, id, { type: 'EXPIRE', at })).state);
}
