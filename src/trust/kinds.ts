import type { ActorKind } from '../actors/store.js';
import { claimGroupMachine, type ClaimGroupContext } from '../../machines/claimGroup.js';
import { thingMachine } from '../../machines/thing.js';
import { licenseMachine } from '../../machines/license.js';

export const claimGroupKind: ActorKind<typeof claimGroupMachine> = {
  type: 'claimGroup', machine: claimGroupMachine, accountOf: (c) => c.accountId,
};
/** The thing's owner and revocation are its machine's; the store writes them onto `things`. */
export const thingKind: ActorKind<typeof thingMachine> = {
  type: 'thing', machine: thingMachine, accountOf: (c) => c.accountId,
  projection: {
    table: 'things',
    columns: ['account_id', 'revoked_at'],
    project: ({ context }) => ({ account_id: context.accountId, revoked_at: context.revokedAt ?? null }),
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

export type ClaimGroupStatus = 'active' | 'capped' | 'expired' | 'revoked';

/** Status at `now`: expiry is computed from the TTL (no timer needed), revocation wins. */
export function claimGroupStatus(state: string, c: ClaimGroupContext, now: Date): ClaimGroupStatus {
  if (state === 'revoked') return 'revoked';
  if (state === 'expired' || now.getTime() >= Date.parse(c.expiresAt)) return 'expired';
  if (state === 'capped' || c.consumed >= c.maxDevices) return 'capped';
  return 'active';
}
