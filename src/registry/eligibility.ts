import crypto from 'node:crypto';
import type { ActorStore } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import { iso, newSecret, sha256 } from '../lib/encoding.js';
import { conflict, invalid, notFound } from '../lib/errors.js';
import { tokenOf } from '../lib/deeplinks.js';
import { accountOfCaller, type Caller } from './caller.js';
import { eligibilityGrantKind } from './kinds.js';
import * as repo from './repo.js';

/** Eligibility artifact tokens: `ela_` + 256 bits (stored as SHA-256); 7 days unless asked otherwise. */
export const ARTIFACT_PREFIX = 'ela_';
const ARTIFACT_TTL_SECONDS = 7 * 24 * 3600;

export interface ArtifactView {
  id: string; account_id: string; note: string | null; status: 'ACTIVE' | 'EXPIRED' | 'REVOKED';
  expires_at: string; revoked_at: string | null; created_by: string; created_at: string;
}
export interface GrantView {
  id: string; artifact_id: string; owner_account_id: string; requester_account_id: string; state: repo.GrantRow['state'];
  decided_at: string | null; decided_by: string | null; reason: string | null; created_at: string;
}
const grantView = (r: repo.GrantRow): GrantView => ({
  id: r.id, artifact_id: r.artifact_id, owner_account_id: r.owner_account_id, requester_account_id: r.requester_account_id, state: r.state,
  decided_at: iso(r.decided_at), decided_by: r.decided_by, reason: r.reason, created_at: iso(r.created_at),
});

/**
 * Eligibility: an owner shares an artifact (a revocable, expiring token with a URL); another
 * account redeems it into a PENDING grant; the owner approves it (the redeemer becomes an eligible
 * accessor, which reference requests need) or rejects it with a reason.
 */
export class Eligibility {
  constructor(private readonly d: { sql: Sql; actors: ActorStore; clock: Clock; publicBaseUrl: string }) {}

  private artifactView(r: repo.ArtifactRow): ArtifactView {
    const status = r.revoked_at ? 'REVOKED' : r.expires_at <= this.d.clock.now() ? 'EXPIRED' : 'ACTIVE';
    return {
      id: r.id, account_id: r.account_id, note: r.note, status, expires_at: iso(r.expires_at), revoked_at: iso(r.revoked_at),
      created_by: r.created_by, created_at: iso(r.created_at),
    };
  }

  async createArtifact(c: Caller, input: { note?: string; expires_in_seconds?: number }): Promise<ArtifactView & { token: string; url: string }> {
    const accountId = accountOfCaller(c);
    const token = newSecret(ARTIFACT_PREFIX);
    const at = this.d.clock.now();
    const row = await repo.insertArtifact(this.d.sql, {
      id: crypto.randomUUID(), accountId, tokenHash: sha256(token), note: input.note ?? null,
      expiresAt: new Date(at.getTime() + (input.expires_in_seconds ?? ARTIFACT_TTL_SECONDS) * 1000), by: c.sub, at,
    });
    return { ...this.artifactView(row), token, url: `${this.d.publicBaseUrl}/links/eligibility#${token}` };
  }

  async listArtifacts(c: Caller, f: { after?: string; limit: number }) {
    return repo.page(await repo.listArtifacts(this.d.sql, accountOfCaller(c), f), f.limit, (r) => this.artifactView(r));
  }

  async getArtifact(c: Caller, id: string): Promise<ArtifactView> {
    const row = await repo.artifact(this.d.sql, id, accountOfCaller(c));
    if (!row) throw notFound(`eligibility artifact ${id} not found`);
    return this.artifactView(row);
  }

  /** Revoked artifacts redeem no more; grants made from it stay as they are. Repeating is 204 again. */
  async revokeArtifact(c: Caller, id: string): Promise<void> {
    if (!(await repo.revokeArtifact(this.d.sql, id, accountOfCaller(c), this.d.clock.now()))) throw notFound(`eligibility artifact ${id} not found`);
  }

  /** 400 malformed, expired, revoked or the caller's own; 404 unknown. The same grant on a repeat. */
  async redeem(c: Caller, input: { token?: string; url?: string }): Promise<GrantView> {
    const requester = accountOfCaller(c);
    const token = tokenOf({ token: input.token, deeplink: input.url }, ARTIFACT_PREFIX, 'eligibility artifact');
    const now = this.d.clock.now();
    const id = crypto.randomUUID();
    const grantId = await this.d.actors.run(async (uow) => {
      // `for share`: a revocation waits for this redemption, or this one sees it
      const a = await repo.artifactByHash(uow.sql, sha256(token));
      if (!a) throw notFound('no eligibility artifact has this token');
      if (a.revoked_at) throw invalid('this eligibility artifact was revoked');
      if (a.expires_at <= now) throw invalid(`this eligibility artifact expired at ${iso(a.expires_at)}`);
      if (a.account_id === requester) throw invalid('this eligibility artifact is your own account\'s');
      if (await repo.insertGrant(uow.sql, { id, artifactId: a.id, owner: a.account_id, requester, by: c.sub, at: now })) {
        await uow.create(eligibilityGrantKind, id, {
          id, artifactId: a.id, ownerAccountId: a.account_id, requesterAccountId: requester, createdAt: now.toISOString(), createdBy: c.sub,
        });
        return id;
      }
      return (await repo.grantOf(uow.sql, a.id, requester))!.id;
    });
    return grantView((await repo.grant(this.d.sql, grantId))!);
  }

  /** The owner's inbox (default), or the grants the caller asked for (`role=requester`). */
  async listGrants(c: Caller, f: { role?: 'owner' | 'requester'; state?: string; after?: string; limit: number }) {
    return repo.page(await repo.listGrants(this.d.sql, accountOfCaller(c), { ...f, role: f.role ?? 'owner' }), f.limit, grantView);
  }

  /** The owner decides: 404 for anyone else, 409 once decided. */
  async decideGrant(c: Caller, id: string, decision: { type: 'APPROVE' } | { type: 'REJECT'; reason: string }): Promise<GrantView> {
    const row = await repo.grant(this.d.sql, id);
    if (!row || row.owner_account_id !== accountOfCaller(c)) throw notFound(`eligibility grant ${id} not found`);
    await this.d.actors.run(async (uow) => {
      const r = await uow.trySend(eligibilityGrantKind, id, { ...decision, at: this.d.clock.now().toISOString(), by: c.sub });
      if ('refused' in r) throw conflict(`eligibility grant ${id} is ${r.state}: decided once`, { extra: { state: r.state } });
    });
    return grantView((await repo.grant(this.d.sql, id))!);
  }
}
