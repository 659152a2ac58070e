import { decodeJwt, errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import { unauthorized } from '../problem.js';
import { DEV_AUDIENCE, type DevIssuer } from './devIssuer.js';
import { IssuerJwks, type JwksOptions } from './jwks.js';
import { parseRealm, type Principal } from './principal.js';
import { TokenCache } from './tokenCache.js';

export interface JwtVerifierOptions {
  /** verified tokens kept (0: no cache); default 10,000 */
  cacheCapacity?: number;
  /** the clock of `exp`/`nbf`/`iat` checks and of the cache, in ms (default Date.now) */
  now?: () => number;
  /** JWKS fetching policy of external issuers */
  jwks?: JwksOptions;
}

/**
 * The development issuer's key is loaded once at start (from Postgres, shared by the nodes) and
 * never changes in a running process: a new key means a restart, which starts an empty cache.
 */
const DEV_KEY_GENERATION = 0;

/** How far a token's `iat`/`nbf` may lie ahead of our clock, and `exp` behind it (seconds). */
export const CLOCK_SKEW_SECONDS = 60;

/**
 * Verifies bearer JWTs against the trusted issuers. `OIDC_ISSUERS` entries are Keycloak base URLs
 * (`https://sso.example.com`) or realm URLs (`https://sso.example.com/realms/<realm>`): a token's
 * `iss` must be `<base>/realms/<realm>` (exactly one path segment), or equal a realm URL entry,
 * and its keys come from that realm's JWKS. Development tokens are verified in-process with the
 * dev issuer's key and must carry its audience. Every token needs `exp` and `sub`; `aud` is
 * checked when `OIDC_AUDIENCE` is set.
 *
 * A verified token is kept in a bounded cache (src/http/auth/tokenCache.ts) until its `exp` or
 * until its issuer's keys change, so a client that sends the same token again costs a hash and a
 * map lookup, not a signature check. Only the verification is cached: resolvers and authorization
 * layers still run on every request.
 */
export class JwtVerifier {
  private readonly jwks = new Map<string, IssuerJwks>();
  private readonly cache: TokenCache;
  private readonly now: () => number;
  private readonly jwksOptions: JwksOptions | undefined;
  /** the generation of an issuer's keys, undefined when they must be fetched first */
  private readonly generationOf = (iss: string): number | undefined => {
    if (this.dev?.realmOf(iss)) return DEV_KEY_GENERATION;
    return this.jwks.get(iss)?.generation();
  };

  constructor(private readonly issuers: string[], private readonly dev: DevIssuer | undefined, private readonly audience?: string, options: JwtVerifierOptions = {}) {
    this.cache = new TokenCache(options.cacheCapacity ?? 10_000);
    this.now = options.now ?? Date.now;
    this.jwksOptions = options.jwks;
  }

  /** Entries in the verified-token cache (tests, metrics). */
  get cachedTokens(): number {
    return this.cache.size;
  }

  async verify(token: string): Promise<Principal> {
    const key = TokenCache.keyOf(token);
    const now = this.now();
    const cached = this.cache.get(key, now, this.generationOf);
    if (cached) return cached;
    const { principal, iss, exp, generation } = await this.verifyFully(token, now);
    // cached only when the issuer's keys did not change while it was being verified
    if (generation !== undefined && generation === this.generationOf(iss)) {
      this.cache.set(key, { principal, expiresAtMs: exp * 1000, issuer: iss, generation }, this.now());
    }
    return { ...principal };
  }

  /** The realm of a trusted external issuer, else undefined. Nested realms (`.../realms/x/realms/y`) are not trusted. */
  private trustedRealm(iss: string): string | undefined {
    for (const entry of this.issuers) {
      const base = entry.replace(/\/$/, '');
      if (base.includes('/realms/')) {
        // a realm URL trusts that realm alone
        if (iss === base) return /\/realms\/([^/]+)$/.exec(base)?.[1];
        continue;
      }
      const realm = iss.startsWith(`${base}/realms/`) ? iss.slice(base.length + 8) : '';
      if (/^[^/]+$/.test(realm)) return realm;
    }
    return undefined;
  }

  private async verifyFully(token: string, now: number): Promise<{ principal: Principal; iss: string; exp: number; generation: number | undefined }> {
    let iss: string | undefined;
    try {
      iss = decodeJwt(token).iss;
    } catch {
      throw unauthorized('bearer token is malformed (not a JWT)');
    }
    if (!iss) throw unauthorized('bearer token has no issuer (iss)');
    const checks = { issuer: iss, requiredClaims: ['exp', 'sub'], clockTolerance: CLOCK_SKEW_SECONDS, currentDate: new Date(now) };
    let payload: JWTPayload;
    let realmName: string | undefined;
    let generation: number | undefined;
    try {
      if ((realmName = this.dev?.realmOf(iss))) {
        generation = DEV_KEY_GENERATION;
        ({ payload } = await jwtVerify(token, this.dev!.publicKey, { ...checks, audience: DEV_AUDIENCE, algorithms: ['ES256'] }));
      } else if ((realmName = this.trustedRealm(iss))) {
        const issuer = iss;
        let keys = this.jwks.get(issuer);
        if (!keys) {
          const url = new URL(`${issuer}/protocol/openid-connect/certs`).href;
          this.jwks.set(issuer, (keys = new IssuerJwks(url, this.now, () => this.cache.dropIssuer(issuer), this.jwksOptions)));
        }
        generation = keys.generation();
        ({ payload } = await jwtVerify(token, keys.key, { ...checks, ...(this.audience ? { audience: this.audience } : {}) }));
        // first fetch, or a fetch while verifying: the generation the token was verified under is
        // the one now, unless another fetch changed the keys meanwhile (then it is not cached)
        if (generation === undefined) generation = keys.generation();
      } else {
        throw unauthorized(`bearer token issuer ${iss} is not trusted`);
      }
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw unauthorized('bearer token has expired');
      if (err instanceof joseErrors.JWSSignatureVerificationFailed) throw unauthorized('bearer token signature is invalid');
      if (err instanceof joseErrors.JOSEError) throw unauthorized(`bearer token rejected: ${err.message}`);
      throw err;
    }
    // jose checks a future `iat` only together with maxTokenAge
    if (typeof payload.iat === 'number' && payload.iat > now / 1000 + CLOCK_SKEW_SECONDS) {
      throw unauthorized('bearer token rejected: "iat" (issued at) lies in the future');
    }
    const realm = parseRealm(realmName);
    if (!realm) throw unauthorized(`bearer token realm ${realmName} is not one this gateway serves (acc-<uuid>, idc-<name>, platform)`);
    if (!payload.sub) throw unauthorized('bearer token has no subject (sub)');
    const principal: Principal = {
      via: 'jwt',
      sub: payload.sub,
      realm: realmName,
      realmKind: realm.kind,
      accountId: realm.accountId,
      roles: rolesOf(payload),
      email: typeof payload.email === 'string' ? payload.email : undefined,
      claims: payload as Record<string, unknown>,
    };
    return { principal, iss, exp: payload.exp!, generation };
  }
}

/** Keycloak roles: `realm_access.roles` plus every `resource_access.<client>.roles`. */
export function rolesOf(payload: JWTPayload): string[] {
  const roles = new Set<string>();
  const realmAccess = payload.realm_access as { roles?: unknown } | undefined;
  if (Array.isArray(realmAccess?.roles)) for (const r of realmAccess.roles) if (typeof r === 'string') roles.add(r);
  const resourceAccess = payload.resource_access as Record<string, { roles?: unknown }> | undefined;
  if (resourceAccess && typeof resourceAccess === 'object') {
    for (const client of Object.values(resourceAccess)) {
      if (Array.isArray(client?.roles)) for (const r of client.roles) if (typeof r === 'string') roles.add(r);
    }
  }
  return [...roles];
}
