import { SignJWT, importJWK, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import type { TestGateway } from './gateway.js';

/** The development issuer's own signing key, read from its table: for tokens /dev/token will not mint. */
export async function devSigningKey(gw: TestGateway): Promise<{ kid: string; key: CryptoKey }> {
  const [row] = await gw.db.sql<{ kid: string; private_jwk: JWK }[]>`select kid, private_jwk from dev_issuer_keys order by created_at limit 1`;
  return { kid: row.kid, key: (await importJWK(row.private_jwk, 'ES256')) as CryptoKey };
}

/** A development token that expired two minutes ago (beyond the verifier's 60 s clock skew). */
export async function expiredDevToken(gw: TestGateway, input: { realm: string; sub: string; roles: string[] }): Promise<string> {
  const { kid, key } = await devSigningKey(gw);
  const now = Math.floor(Date.now() / 1000);
  const claims: JWTPayload = { realm_access: { roles: input.roles } };
  return new SignJWT(claims).setProtectedHeader({ alg: 'ES256', kid })
    .setIssuer(`${gw.gw.config.PUBLIC_BASE_URL}/realms/${input.realm}`).setSubject(input.sub).setAudience('gateway')
    .setIssuedAt(now - 600).setExpirationTime(now - 120).sign(key);
}
