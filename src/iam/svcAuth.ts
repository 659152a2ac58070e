import type { Db } from '../db/client.js';
import type { Principal } from '../http/auth/principal.js';
import type { Clock } from '../lib/clock.js';
import { hashMatches } from '../lib/encoding.js';
import { unauthenticated } from '../lib/errors.js';
import type { Assignments } from './assignments.js';
import type { IamCache } from './cache.js';
import type { LastUsed } from './lastUsed.js';
import * as repo from './repo.js';
import type { PrincipalRoles } from './roles.js';
import { ACCESS_KEY_ID, SECRET_KEY, SESSION_TOKEN } from './schemas.js';

/** What the SVC hot path keeps per access key id (hashes only). */
interface CachedCredential {
  id: string;
  accountId: string;
  temporary: boolean;
  secretHash: Buffer;
  tokenHash: Buffer | null;
  /** static: the machine's projected state; temporary: REVOKED once `revoked_at` is set */
  status: 'ACTIVE' | 'INACTIVE' | 'REVOKED';
  expiresAt: number | null;
  principalId: string;
  realm: string;
}

/**
 * The `SVC base64(access_key_id:secret_key)` scheme (static AKSV and temporary ASIA keys; the latter
 * with their `X-Session-Token`). Served from the node cache; every change that must take effect at
 * once invalidates it on all nodes (src/iam/cache.ts).
 */
export class SvcAuthenticator {
  constructor(
    private readonly sql: Db,
    private readonly clock: Clock,
    private readonly cache: IamCache,
    private readonly roles: Pick<PrincipalRoles, 'peek' | 'get'>,
    private readonly assignments: Pick<Assignments, 'peek' | 'roles'>,
    private readonly lastUsed: Pick<LastUsed, 'touch'>,
  ) {}

  /** `credentials`: what follows `SVC ` in Authorization; `sessionToken`: the X-Session-Token header. */
  async authenticate(credentials: string, sessionToken: string | undefined): Promise<Principal> {
    const { accessKeyId, secret } = parseSvc(credentials);
    const c = this.cache.peek<CachedCredential>('cred', accessKeyId) ?? (await this.cache.get('cred', accessKeyId, () => this.load(accessKeyId)));
    if (!c) throw unauthenticated(`credential not found: no access key ${accessKeyId}`, { type: 'credential-not-found', guess: { scheme: 'svc', kind: 'unknown-identifier' } });
    if (!hashMatches(secret, c.secretHash)) throw unauthenticated(`secret key invalid for access key ${accessKeyId}`, { type: 'secret-invalid', guess: { scheme: 'svc', kind: 'wrong-secret' } });
    if (c.status === 'REVOKED') throw unauthenticated(`temporary credential ${accessKeyId} has been revoked`, { type: 'credential-revoked' });
    if (c.status === 'INACTIVE') throw unauthenticated(`credential inactive: access key ${accessKeyId} is INACTIVE (an account admin can set it ACTIVE)`, { type: 'credential-inactive' });
    const now = this.clock.now();
    if (c.expiresAt !== null && c.expiresAt <= now.getTime()) throw unauthenticated(`credential expired at ${new Date(c.expiresAt).toISOString()}; request new temporary credentials`, { type: 'credential-expired' });
    let roles: string[];
    if (c.temporary) {
      if (sessionToken === undefined || sessionToken === '') throw unauthenticated(`session token missing: access key ${accessKeyId} is temporary (ASIA); send X-Session-Token`, { type: 'session-token-missing' });
      if (!SESSION_TOKEN.test(sessionToken) || !hashMatches(sessionToken, c.tokenHash!)) {
        throw unauthenticated(`session token invalid for access key ${accessKeyId}`, { type: 'session-token-invalid', guess: { scheme: 'svc', kind: 'wrong-secret' } });
      }
      roles = (this.assignments.peek(c.realm, c.principalId, c.accountId) ?? (await this.assignments.roles(c.realm, c.principalId, c.accountId))) ?? [];
    } else {
      roles = (this.roles.peek(c.accountId, c.principalId) ?? (await this.roles.get(c.accountId, c.principalId))) ?? [];
    }
    this.lastUsed.touch(accessKeyId, now);
    return {
      via: 'credential',
      sub: c.principalId,
      realm: c.realm,
      realmKind: c.temporary ? 'idc' : 'acc',
      accountId: c.accountId,
      roles,
      credential: { id: c.id, accessKeyId, temporary: c.temporary },
    };
  }

  private async load(accessKeyId: string): Promise<CachedCredential | undefined> {
    const r = await repo.credentialByAccessKey(this.sql, accessKeyId);
    if (!r) return undefined;
    const temporary = r.kind === 'temporary';
    return {
      id: r.id, accountId: r.account_id, temporary, secretHash: r.secret_hash, tokenHash: r.session_token_hash,
      status: temporary ? (r.revoked_at ? 'REVOKED' : 'ACTIVE') : (r.status ?? 'INACTIVE'),
      expiresAt: r.expires_at ? new Date(r.expires_at).getTime() : null, principalId: r.principal_id, realm: r.realm,
    };
  }
}

/** `SVC base64(akid:secret)` -> its parts, or 401 credential format invalid. */
export function parseSvc(credentials: string): { accessKeyId: string; secret: string } {
  const invalid = (why: string) => unauthenticated(`credential format invalid: ${why}; expected SVC base64(<access_key_id>:<secret_key>)`, { type: 'credential-format-invalid' });
  if (credentials.length > 200 || !/^[A-Za-z0-9+/]+={0,2}$/.test(credentials)) throw invalid('not Base64');
  const decoded = Buffer.from(credentials, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) throw invalid('no colon between access key id and secret key');
  const accessKeyId = decoded.slice(0, colon);
  const secret = decoded.slice(colon + 1);
  if (!ACCESS_KEY_ID.test(accessKeyId)) throw invalid('access key id must be AKSV or ASIA followed by 16 upper-case hex characters');
  if (!SECRET_KEY.test(secret)) throw invalid('secret key must be 54 Base64url characters');
  return { accessKeyId, secret };
}
