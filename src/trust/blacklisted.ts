import type { BlacklistedIdentity, Gateway } from '../gateway.js';
import type { TrustService } from './service.js';

/**
 * An identity was put on the identity blacklist: every thing of that (model, serial), in any
 * account, is revoked the way DELETE /api/v1/things/{id} does it (certificate flag, CRL, broker
 * disconnect). Called after the add commits and again by the blacklist's sweep, so it only looks
 * at things not revoked yet. Returns how many it revoked.
 */
export async function revokeBlacklisted(gw: Gateway, trust: TrustService, identity: BlacklistedIdentity): Promise<number> {
  // things_model_serial (migration 0800) serves this lookup
  const things = await gw.sql<{ id: string; account_id: string }[]>`
    select id, account_id from things where model = ${identity.model} and serial = ${identity.sn} and revoked_at is null`;
  for (const thing of things) await trust.revokeThing(thing.account_id, thing.id, `blacklist:${identity.by}`);
  return things.length;
}
