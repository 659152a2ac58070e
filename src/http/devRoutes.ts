import { z } from 'zod';
import type { Gateway, ZodApp } from '../gateway.js';
import { badRequest, forbidden } from './problem.js';
import { parseRealm } from './auth/principal.js';
import { isLoopback } from './trustedProxies.js';

const tokenRequest = z.strictObject({
  realm: z.string().describe('acc-<accountId> | idc-<name> | platform'),
  sub: z.string().min(1).max(255),
  roles: z.array(z.string().min(1).max(100)).max(50).default([]),
  email: z.email().optional(),
  expires_in: z.number().int().min(1).max(7 * 86400).optional(),
  resource_access: z.record(z.string(), z.object({ roles: z.array(z.string()) })).optional(),
});

/** The development token issuer (embedded mode): mints Keycloak-shaped JWTs and serves its JWKS. */
export async function devRoutes(app: ZodApp, gw: Gateway): Promise<void> {
  const issuer = gw.devIssuer!;
  app.post('/dev/token', {
    config: { auth: 'public' },
    schema: {
      tags: ['development'],
      summary: 'Mint a development access token (embedded mode only)',
      body: tokenRequest,
      response: { 200: z.object({ access_token: z.string(), token_type: z.literal('Bearer'), expires_in: z.number() }) },
    },
  }, async (request) => {
    // whoever reaches this mints any token, platform-admin included: local callers only by default
    if (!gw.config.DEV_TOKEN_REMOTE && !isLoopback(request.ip)) {
      throw forbidden('development tokens are minted for loopback callers only; run `npm run token` on the gateway host, or set DEV_TOKEN_REMOTE=true');
    }
    const { realm, resource_access, ...rest } = request.body;
    if (!parseRealm(realm)) throw badRequest(`realm must be acc-<accountId UUID>, idc-<name> or platform; got ${JSON.stringify(realm)}`);
    return issuer.sign({ realm, ...rest, claims: resource_access ? { resource_access } : undefined });
  });
  app.get('/realms/:realm/protocol/openid-connect/certs', {
    config: { auth: 'public' },
    schema: { tags: ['development'], summary: 'JWKS of the development issuer', params: z.object({ realm: z.string() }) },
  }, async () => ({ keys: [issuer.publicJwk] }));
  app.get('/realms/:realm/.well-known/openid-configuration', {
    config: { auth: 'public' },
    schema: { tags: ['development'], summary: 'OIDC discovery of the development issuer', params: z.object({ realm: z.string() }) },
  }, async (request) => ({
    issuer: issuer.issuerFor(request.params.realm),
    jwks_uri: `${issuer.issuerFor(request.params.realm)}/protocol/openid-connect/certs`,
    id_token_signing_alg_values_supported: ['ES256'],
  }));
}
