import crypto from 'node:crypto';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import { tokenOf } from '../lib/deeplinks.js';
import { iso, newSecret, sha256 } from '../lib/encoding.js';
import { invalid, notFound } from '../lib/errors.js';
import { accountOfCaller, type Caller } from './caller.js';
import { referenceView, type ThingReferenceView } from './references.js';
import * as repo from './repo.js';

/** Device deeplink tokens: `dlk_` + 256 bits (stored as SHA-256); 7 days unless asked otherwise. */
export const DEEPLINK_PREFIX = 'dlk_';
const DEEPLINK_TTL_SECONDS = 7 * 24 * 3600;

export interface DeeplinkView { id: string; thing_id: string; expires_at: string; redemptions: number; created_by: string; created_at: string }
const view = (r: repo.DeeplinkRow): DeeplinkView => ({
  id: r.id, thing_id: r.thing_id, expires_at: iso(r.expires_at), redemptions: r.redemptions, created_by: r.created_by, created_at: iso(r.created_at),
});

/**
 * Device deeplinks: a single-thing token with an encodable URL; whoever redeems it gets one
 * thing_reference to that thing in its repository (once per account; a repeat answers the same).
 */
export class DeviceDeeplinks {
  constructor(private readonly d: { sql: Sql; clock: Clock; publicBaseUrl: string }) {}

  async create(c: Caller, input: { thing_id: string; expires_in_seconds?: number }): Promise<DeeplinkView & { token: string; url: string }> {
    const accountId = accountOfCaller(c);
    if ((await repo.thingOwner(this.d.sql, input.thing_id)) !== accountId) throw invalid(`thing_id ${input.thing_id} names no thing of your account`);
    const token = newSecret(DEEPLINK_PREFIX);
    const at = this.d.clock.now();
    const row = await repo.insertDeeplink(this.d.sql, {
      id: crypto.randomUUID(), accountId, thingId: input.thing_id, tokenHash: sha256(token),
      expiresAt: new Date(at.getTime() + (input.expires_in_seconds ?? DEEPLINK_TTL_SECONDS) * 1000), by: c.sub, at,
    });
    return { ...view(row), token, url: `${this.d.publicBaseUrl}/links/device#${encodeURIComponent(token)}` };
  }

  async list(c: Caller, f: { after?: string; limit: number }) {
    return repo.page(await repo.listDeeplinks(this.d.sql, accountOfCaller(c), f), f.limit, view);
  }

  /** The token stops working; references already redeemed stay. */
  async delete(c: Caller, id: string): Promise<void> {
    if (!(await repo.deleteDeeplink(this.d.sql, id, accountOfCaller(c)))) throw notFound(`device deeplink ${id} not found`);
  }

  /** 400 malformed, expired or the caller's own thing; 404 unknown (or deleted). */
  async redeem(c: Caller, input: { token?: string; url?: string }): Promise<ThingReferenceView> {
    const accountId = accountOfCaller(c);
    const token = tokenOf({ token: input.token, deeplink: input.url }, DEEPLINK_PREFIX, 'device deeplink');
    const now = this.d.clock.now();
    const id = await this.d.sql.begin(async (tx) => {
      const link = await repo.deeplinkByHash(tx, sha256(token));
      if (!link) throw notFound('no device deeplink has this token');
      if (link.expires_at <= now) throw invalid(`this device deeplink expired at ${iso(link.expires_at)}`);
      if (link.account_id === accountId) throw invalid('this device deeplink is to a thing of your own account');
      return (await repo.referenceFromDeeplink(tx, link, accountId)).id;
    });
    return referenceView((await repo.thingReference(this.d.sql, id))!);
  }
}
