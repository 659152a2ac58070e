import crypto from 'node:crypto';
import type { Db } from '../db/client.js';
import type { Principal } from '../http/auth/principal.js';
import type { Logger } from '../log.js';
import type { Clock } from '../lib/clock.js';
import { iso, sha256 } from '../lib/encoding.js';
import { invalid, notFound, refused } from '../lib/errors.js';
import type { Assignments } from './assignments.js';
import type { IamCache } from './cache.js';
import { newAccessKeyId, newSecretKey, newSessionToken } from './keys.js';
import type { LastUsed } from './lastUsed.js';
import * as repo from './repo.js';
import { TEMPORARY_PREFIX } from './schemas.js';

const SESSION_DESCRIPTION = 'Temporary credentials (STS get-session-token, identity center)';

/**
 * STS: temporary (ASIA) credentials for identity-center users. Plain rows, not actors: one per
 * exchange and unbounded in number, and their lifecycle has no decision to take: expiry is
 * `expires_at` compared with the clock at use, revocation stamps `revoked_at` (one statement for
 * revoke-all), the hourly job deletes expired rows.
 */
export class StsSessions {
  constructor(
    private readonly sql: Db,
    private readonly clock: Clock,
    private readonly cache: Pick<IamCache, 'invalidate'>,
    private readonly lastUsed: Pick<LastUsed, 'flush'>,
    private readonly assignments: Pick<Assignments, 'roles'>,
    private readonly log: Logger,
  ) {}

  /** The caller of an STS call: a bearer JWT of an idc-* realm, else 400 (spec). */
  requireIdcJwt(principal: Principal): void {
    if (principal.via !== 'jwt' || principal.realmKind !== 'idc') {
      const what = principal.via !== 'jwt' ? 'an access-key credential' : `a JWT of realm ${principal.realm}`;
      throw invalid(`STS calls accept only a bearer JWT from an identity-center realm (idc-*); this call carries ${what}`, { type: 'sts-realm' });
    }
  }

  /** Account-bound STS calls: `X-Account-Id` (parsed) present, equal to the account named in the call, assigned. */
  requireAccountHeader(principal: Principal, header: string | undefined, named: string | undefined): void {
    if (header === undefined || named === undefined) throw invalid('header X-Account-Id is required for this STS call');
    if (header !== named.toLowerCase()) throw invalid(`X-Account-Id ${header} does not match the account of the request (${named})`);
    if (!principal.accountId) throw refused(`you (${principal.realm}/${principal.sub}) are not assigned to account ${named}`, { type: 'not-assigned' });
  }

  async issue(principal: Principal, accountId: string, durationSeconds: number) {
    const roles = await this.assignments.roles(principal.realm, principal.sub, accountId);
    if (!roles) throw refused(`you (${principal.realm}/${principal.sub}) are not assigned to account ${accountId}; a platform admin assigns identity-center users to accounts`, { type: 'not-assigned' });
    const accessKeyId = newAccessKeyId(TEMPORARY_PREFIX);
    const secret = newSecretKey();
    const token = newSessionToken();
    const now = this.clock.now();
    const expiration = new Date(now.getTime() + durationSeconds * 1000).toISOString();
    await repo.insertCredential(this.sql, {
      id: crypto.randomUUID(), account_id: accountId, access_key_id: accessKeyId, kind: 'temporary', secret_hash: sha256(secret), session_token_hash: sha256(token),
      principal_id: principal.sub, principal_type: 'federated', realm: principal.realm,
      description: SESSION_DESCRIPTION, created_at: now.toISOString(), expires_at: expiration,
    });
    return { access_key_id: accessKeyId, secret_key: secret, session_token: token, expiration };
  }

  async list(principal: Principal, accountId: string) {
    await this.lastUsed.flush();
    const rows = await repo.listSessions(this.sql, accountId, principal.realm, principal.sub, this.clock.now());
    return rows.map((r) => ({
      id: r.id, access_key_id: r.access_key_id, status: 'ACTIVE' as const, principal_id: r.principal_id, principal_type: 'federated' as const,
      description: r.description, created_at: iso(r.created_at), last_used_at: iso(r.last_used_at ?? r.created_at), expires_at: iso(r.expires_at!),
    }));
  }

  async revoke(principal: Principal, accountId: string, accessKeyId: string) {
    const keys = await repo.revokeSessions(this.sql, this.clock.now(), accountId, principal.realm, principal.sub, accessKeyId);
    if (keys.length === 0) throw notFound(`no active session ${accessKeyId} of yours in account ${accountId}`);
    await this.cache.invalidate(keys.map((k) => `cred:${k}`), { wait: true });
    return { message: `session ${accessKeyId} revoked`, access_key_id: accessKeyId };
  }

  async revokeAll(principal: Principal, accountId: string) {
    const keys = await repo.revokeSessions(this.sql, this.clock.now(), accountId, principal.realm, principal.sub);
    await this.cache.invalidate(keys.map((k) => `cred:${k}`), { wait: true });
    return { message: `${keys.length} session(s) revoked`, revoked_count: keys.length };
  }

  /** The hourly job: deletes the temporary credentials expired by now (revoked ones too, once expired). */
  async cleanupExpired(): Promise<number> {
    const keys = await repo.deleteExpiredTemporary(this.sql, this.clock.now());
    if (keys.length) {
      await this.cache.invalidate(keys.map((k) => `cred:${k}`), { wait: false });
      this.log.info({ deleted: keys.length }, 'iam: expired temporary credentials deleted');
    }
    return keys.length;
  }
}
