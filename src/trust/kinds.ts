import type { ActorKind } from '../actors/store.js';
import { claimGroupMachine, type ClaimGroupContext } from '../../machines/claimGroup.js';
import { thingMachine } from '../../machines/thing.js';

export const claimGroupKind: ActorKind<typeof claimGroupMachine> = {
  type: 'claimGroup', machine: claimGroupMachine, accountOf: (c) => c.accountId,
};
export const thingKind: ActorKind<typeof thingMachine> = {
  type: 'thing', machine: thingMachine, accountOf: (c) => c.accountId,
};

export type ClaimGroupStatus = 'active' | 'capped' | 'expired' | 'revoked';

/** Status at `now`: expiry is computed from the TTL (no timer needed), revocation wins. */
export function claimGroupStatus(state: string, c: ClaimGroupContext, now: Date): ClaimGroupStatus {
  if (state === 'revoked') return 'revoked';
  if (state === 'expired' || now.getTime() >= Date.parse(c.expiresAt)) return 'expired';
  if (state === 'capped' || c.consumed >= c.maxDevices) return 'capped';
  return 'active';
}
