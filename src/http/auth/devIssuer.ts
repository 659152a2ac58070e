import crypto from 'node:crypto';
import { SignJWT, exportJWK, generateKeyPair, importJWK, type JWK, type CryptoKey } from 'jose';
import type { Sql } from '../../db/client.js';

/** The `aud` of every development token; the verifier requires it. */
export const DEV_AUDIENCE = 'gateway';

export interface DevTokenRequest {
  realm: string;
  sub: string;
  roles: string[];
  email?: string;
  expires_in?: number;
  /** extra claims (for example `resource_access`) */
  claims?: Record<string, unknown>;
}

/**
 * The development token issuer: one ES256 key kept in Postgres (so every node of a dev cluster
 * signs and verifies with the same key), Keycloak-shaped tokens, issuer
 * `${PUBLIC_BASE_URL}/realms/{realm}`, JWKS at `/realms/{realm}/protocol/openid-connect/certs`.
 */
export class DevIssuer {
  private constructor(readonly baseUrl: string, readonly kid: string, private readonly privateKey: CryptoKey, readonly publicJwk: JWK, readonly publicKey: CryptoKey) {}

  static async load(sql: Sql, baseUrl: string): Promise<DevIssuer> {
    let [row] = await sql<{ kid: string; private_jwk: JWK; public_jwk: JWK }[]>`select kid, private_jwk, public_jwk from dev_issuer_keys order by created_at limit 1`;
    if (!row) {
      const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
      const kid = crypto.randomBytes(8).toString('hex');
      const priv = await exportJWK(privateKey);
      const pub = { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' };
      await sql`insert into dev_issuer_keys (kid, private_jwk, public_jwk) values (${kid}, ${sql.json(priv as never)}, ${sql.json(pub as never)}) on conflict do nothing`;
      [row] = await sql<{ kid: string; private_jwk: JWK; public_jwk: JWK }[]>`select kid, private_jwk, public_jwk from dev_issuer_keys order by created_at limit 1`;
    }
    const privateKey = (await importJWK(row.private_jwk, 'ES256')) as CryptoKey;
    const publicKey = (await importJWK(row.public_jwk, 'ES256')) as CryptoKey;
    return new DevIssuer(baseUrl, row.kid, privateKey, row.public_jwk, publicKey);
  }

  issuerFor(realm: string): string {
    return `${this.baseUrl}/realms/${realm}`;
  }

  /** The realm of one of this issuer's `iss` values (exactly one path segment), else undefined. */
  realmOf(iss: string): string | undefined {
    const prefix = `${this.baseUrl}/realms/`;
    const realm = iss.startsWith(prefix) ? iss.slice(prefix.length) : '';
    return /^[^/]+$/.test(realm) ? realm : undefined;
  }

  isOwnIssuer(iss: string): boolean {
    return this.realmOf(iss) !== undefined;
  }

  async sign(req: DevTokenRequest): Promise<{ access_token: string; token_type: 'Bearer'; expires_in: number }> {
    const expiresIn = req.expires_in ?? 3600;
    const token = await new SignJWT({
      ...req.claims,
      realm_access: { roles: req.roles },
      ...(req.email ? { email: req.email } : {}),
      preferred_username: req.sub,
      azp: 'gateway-dev',
      typ: 'Bearer',
    })
      .setProtectedHeader({ alg: 'ES256', kid: this.kid, typ: 'JWT' })
      .setIssuer(this.issuerFor(req.realm))
      .setSubject(req.sub)
      .setAudience(DEV_AUDIENCE)
      .setJti(crypto.randomUUID())
      .setIssuedAt()
      .setExpirationTime(Math.floor(Date.now() / 1000) + expiresIn)
      .sign(this.privateKey);
    return { access_token: token, token_type: 'Bearer', expires_in: expiresIn };
  }
}
