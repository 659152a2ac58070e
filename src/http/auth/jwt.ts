import { createRemoteJWKSet, decodeJwt, errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import { unauthorized } from '../problem.js';
import type { DevIssuer } from './devIssuer.js';
import { parseRealm, type Principal } from './principal.js';

/**
 * Verifies bearer JWTs against the trusted issuers. `OIDC_ISSUERS` entries are Keycloak base URLs
 * (`https://sso.example.com` or `https://sso.example.com/realms/<realm>`): a token's `iss` must be
 * `<base>/realms/<realm>` (or equal the entry), and its keys come from that realm's JWKS.
 * Development tokens are verified in-process with the dev issuer's key.
 */
export class JwtVerifier {
  private readonly jwks = new Map<string, ReturnType<typeof createRemoteJWKSet>>();

  constructor(private readonly issuers: string[], private readonly dev: DevIssuer | undefined, private readonly audience?: string) {}

  private trusted(iss: string): boolean {
    return this.issuers.some((base) => {
      const b = base.replace(/\/$/, '');
      return iss === b || (iss.startsWith(`${b}/realms/`) && !iss.slice(b.length + 8).includes('/'));
    });
  }

  async verify(token: string): Promise<Principal> {
    let iss: string | undefined;
    try {
      iss = decodeJwt(token).iss;
    } catch {
      throw unauthorized('bearer token is malformed (not a JWT)');
    }
    if (!iss) throw unauthorized('bearer token has no issuer (iss)');
    let payload: JWTPayload;
    try {
      if (this.dev?.isOwnIssuer(iss)) {
        ({ payload } = await jwtVerify(token, this.dev.publicKey, { issuer: iss, algorithms: ['ES256'] }));
      } else if (this.trusted(iss)) {
        let keys = this.jwks.get(iss);
        if (!keys) this.jwks.set(iss, (keys = createRemoteJWKSet(new URL(`${iss}/protocol/openid-connect/certs`))));
        ({ payload } = await jwtVerify(token, keys, { issuer: iss, ...(this.audience ? { audience: this.audience } : {}) }));
      } else {
        throw unauthorized(`bearer token issuer ${iss} is not trusted`);
      }
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw unauthorized('bearer token has expired');
      if (err instanceof joseErrors.JWSSignatureVerificationFailed) throw unauthorized('bearer token signature is invalid');
      if (err instanceof joseErrors.JOSEError) throw unauthorized(`bearer token rejected: ${err.message}`);
      throw err;
    }
    const realmName = iss.slice(iss.lastIndexOf('/realms/') + 8);
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
