import { createRemoteJWKSet, decodeJwt, errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import { unauthorized } from '../problem.js';
import { DEV_AUDIENCE, type DevIssuer } from './devIssuer.js';
import { parseRealm, type Principal } from './principal.js';

/** How far a token's `iat`/`nbf` may lie ahead of our clock, and `exp` behind it (seconds). */
export const CLOCK_SKEW_SECONDS = 60;

/**
 * Verifies bearer JWTs against the trusted issuers. `OIDC_ISSUERS` entries are Keycloak base URLs
 * (`https://sso.example.com`) or realm URLs (`https://sso.example.com/realms/<realm>`): a token's
 * `iss` must be `<base>/realms/<realm>` (exactly one path segment), or equal a realm URL entry,
 * and its keys come from that realm's JWKS. Development tokens are verified in-process with the
 * dev issuer's key and must carry its audience. Every token needs `exp` and `sub`; `aud` is
 * checked when `OIDC_AUDIENCE` is set.
 */
export class JwtVerifier {
  private readonly jwks = new Map<string, ReturnType<typeof createRemoteJWKSet>>();

  constructor(private readonly issuers: string[], private readonly dev: DevIssuer | undefined, private readonly audience?: string) {}

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

  async verify(token: string): Promise<Principal> {
    let iss: string | undefined;
    try {
      iss = decodeJwt(token).iss;
    } catch {
      throw unauthorized('bearer token is malformed (not a JWT)');
    }
    if (!iss) throw unauthorized('bearer token has no issuer (iss)');
    const checks = { issuer: iss, requiredClaims: ['exp', 'sub'], clockTolerance: CLOCK_SKEW_SECONDS };
    let payload: JWTPayload;
    let realmName: string | undefined;
    try {
      if ((realmName = this.dev?.realmOf(iss))) {
        ({ payload } = await jwtVerify(token, this.dev!.publicKey, { ...checks, audience: DEV_AUDIENCE, algorithms: ['ES256'] }));
      } else if ((realmName = this.trustedRealm(iss))) {
        let keys = this.jwks.get(iss);
        if (!keys) this.jwks.set(iss, (keys = createRemoteJWKSet(new URL(`${iss}/protocol/openid-connect/certs`))));
        ({ payload } = await jwtVerify(token, keys, { ...checks, ...(this.audience ? { audience: this.audience } : {}) }));
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
    if (typeof payload.iat === 'number' && payload.iat > Date.now() / 1000 + CLOCK_SKEW_SECONDS) {
      throw unauthorized('bearer token rejected: "iat" (issued at) lies in the future');
    }
    const realm = parseRealm(realmName);
    if (!realm) throw unauthorized(`bearer token realm ${realmName} is not one this gateway serves (acc-<uuid>, idc-<name>, platform)`);
    if (!payload.sub) throw unauthorized('bearer token has no subject (sub)');
    return {
      via: 'jwt',
      sub: payload.sub,
      realm: realmName,
      realmKind: realm.kind,
      accountId: realm.accountId,
      roles: rolesOf(payload),
      email: typeof payload.email === 'string' ? payload.email : undefined,
      claims: payload as Record<string, unknown>,
    };
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
