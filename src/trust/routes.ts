import { TLSSocket } from 'node:tls';
import { z } from 'zod';
import type { FastifyRequest } from 'fastify';
import type { Gateway, ZodApp } from '../gateway.js';
import { accountOf, modelScopeOf, principalOf, type RequestAuthenticator } from '../http/auth/plugin.js';
import { devicePrincipal } from '../http/auth/principal.js';
import type { ThingScope } from './lifecycle.js';
import { isTrustedProxy } from '../http/trustedProxies.js';
import { notFound, refused, unauthenticated } from '../lib/errors.js';
import type { DdiService } from './ddi.js';
import { listModels, readModel } from './model-routes.js';
import type { TrustServices } from './index.js';
import {
  accessCodeSchema, claimGroupCreateSchema, claimGroupCreatedSchema, claimGroupSchema, deviceStatusSchema, emqxAuthnSchema,
  emqxResultSchema, enrollSchema, enrollmentResponseSchema, joinSchema, joinedSchema, licenseDenySchema, licenseListQuery, licenseParams,
  licensePendingSchema, licenseRecordSchema, licenseRenewSchema, licenseRequestSchema, licenseSchema, licenseStatusSchema, modelCreateSchema, thingAnnihilatedSchema, thingResolveQuery, thingResolvedSchema, thingStateSchema, factoryEligibilitySchema, enrollmentCreateSchema, enrollmentCreatedSchema, enrollmentListQuery, enrollmentPageSchema, enrollmentSchema, modelCreatedSchema, modelSchema, revokedSchema, thingCreateSchema, thingCreatedSchema, thingIdParams,
} from './schemas.js';

const WRITE = ['admin', 'operator'] as const;
const READ = ['admin', 'operator', 'viewer'] as const;
const ADMIN = ['admin'] as const;
/** Factory services (signed requests) are judged by their policy instead of roles (src/factory/policy.ts). */

/** The caller's things: its account's; a factory service's, those of its model only. */
function scopeOf(request: FastifyRequest): ThingScope {
  return { accountId: accountOf(request), modelId: modelScopeOf(request) };
}
const idParams = z.object({ id: z.uuid() });
const licenseIdParams = z.object({ licenseId: z.uuid() });
const licenseJwksSchema = z.object({
  keys: z.array(z.object({ kty: z.literal('EC'), crv: z.literal('P-256'), x: z.string(), y: z.string(), kid: z.string(), alg: z.literal('ES256'), use: z.literal('sig') })),
});

/** The device routes' access: the enrollment token or the client certificate (the hook checks `{thingId}`). */
const DEVICE = { schemes: ['device-token', 'device-cert'] } as const;

/**
 * How a device proves itself over HTTP, as auth schemes of the hook (services get plain values):
 * `Authorization: TargetToken <enrollment token>`, or its client certificate: the TLS peer
 * certificate on the mutual-TLS listener (HTTPS_PORT), or `X-SSL-Client-Cert` (URL-encoded PEM,
 * nginx's `$ssl_client_escaped_cert`) but only from a TRUSTED_PROXIES peer: anyone else could
 * paste a device's certificate, which is public.
 */
export function deviceAuthenticators(gw: Gateway, ddi: DdiService): Record<'device-token' | 'device-cert', RequestAuthenticator> {
  return {
    'device-token': {
      describe: 'Authorization: TargetToken <enrollment token>',
      openapi: { type: 'apiKey', in: 'header', name: 'Authorization', description: 'TargetToken <enrollment token> (token flow, until the token expires)' },
      async authenticate(request) {
        const [scheme, token] = (request.headers.authorization ?? '').split(/\s+/, 2);
        if (scheme?.toLowerCase() !== 'targettoken') return undefined;
        if (!token) throw unauthenticated('Authorization: TargetToken has no enrollment token');
        return devicePrincipal(await ddi.thingOfToken(token), 'enrollment-token');
      },
    },
    'device-cert': {
      describe: `mutual TLS with the device certificate${gw.config.HTTPS_PORT !== undefined ? ` (port ${gw.config.HTTPS_PORT})` : ''}`,
      openapi: { type: 'mutualTLS', description: 'the device certificate: on the HTTPS_PORT listener, or forwarded by a TRUSTED_PROXIES proxy as X-SSL-Client-Cert' },
      async authenticate(request) {
        const peer = peerCertificate(request);
        if (peer) return devicePrincipal(await ddi.thingOfCertificate(peer), 'client-certificate');
        const forwarded = request.headers['x-ssl-client-cert'];
        if (typeof forwarded !== 'string') return undefined;
        if (!isTrustedProxy(request.socket.remoteAddress, gw.config.TRUSTED_PROXIES)) {
          throw unauthenticated('X-SSL-Client-Cert is honoured only from a proxy in TRUSTED_PROXIES; use mutual TLS or the enrollment token');
        }
        let pem: string;
        try { pem = decodeURIComponent(forwarded); } catch { throw unauthenticated('X-SSL-Client-Cert is not a URL-encoded PEM certificate'); }
        return devicePrincipal(await ddi.thingOfCertificate(pem), 'client-certificate');
      },
    },
  };
}

/** The DER of a client certificate the TLS layer verified (chain to the device CA, CRL); undefined when none was sent. */
function peerCertificate(request: FastifyRequest): Buffer | undefined {
  const socket = request.raw.socket;
  if (!(socket instanceof TLSSocket)) return undefined;
  const peer = socket.getPeerCertificate();
  if (!peer?.raw) return undefined;
  if (!socket.authorized) {
    if (socket.authorizationError?.toString() === 'CERT_REVOKED') throw refused('client certificate is revoked (on the device CA CRL)');
    throw unauthenticated(`client certificate refused: ${socket.authorizationError}`);
  }
  return peer.raw;
}

/** Device trust routes: tenant plane (/api/v1), device plane (/ddi/v1), public PKI endpoints. */
export async function trustRoutes(app: ZodApp, gw: Gateway, s: TrustServices): Promise<void> {
  // --- models (provisioning part)
  app.post('/api/v1/models', {
    config: { auth: { action: 'factory:Model:Create', roles: WRITE } },
    schema: { tags: ['models'], summary: 'Create a device model (vid:pid) with its provisioning method', body: modelCreateSchema, response: { 201: modelCreatedSchema } },
  }, async (request, reply) => reply.code(201).send(await s.models.create(accountOf(request), request.body)));
  app.get('/api/v1/models', {
    config: { auth: { action: 'factory:Model:List', roles: READ } },
    schema: {
      tags: ['models'], summary: 'List the account\'s models (keyset pagination by id)',
      querystring: z.strictObject({ limit: z.coerce.number().int().min(1).max(100).default(20), after: z.uuid().optional() }),
      response: { 200: z.object({ items: z.array(modelSchema), next_cursor: z.string().nullable() }) },
    },
  }, async (request) => listModels(s.models, request, request.query.limit, request.query.after));
  app.get('/api/v1/models/:id', {
    config: { auth: { action: 'factory:Model:Read', roles: READ } },
    schema: { tags: ['models'], summary: 'Read a model', params: idParams, response: { 200: modelSchema } },
  }, async (request) => readModel(s.models, request, request.params.id));

  // --- things (tenant plane)
  app.post('/api/v1/things', {
    config: { auth: { action: 'factory:Thing:Enroll', roles: WRITE, capability: 'enroll_things' } },
    schema: { tags: ['things'], summary: 'Register a device; returns its single-use enrollment token', body: thingCreateSchema, response: { 201: thingCreatedSchema } },
  }, async (request, reply) => reply.code(201).send(await s.trust.registerThing(accountOf(request), request.body)));
  app.delete('/api/v1/things/:thingId', {
    config: { auth: { action: 'factory:Thing:Revoke', roles: WRITE } },
    schema: { tags: ['things'], summary: 'Revoke a device: revoked flag, CRL regenerated, MQTT session disconnected', params: thingIdParams, response: { 200: revokedSchema } },
  }, async (request) => s.trust.revokeThing(accountOf(request), request.params.thingId, principalOf(request).sub));
  app.post('/api/v1/things/:thingId/access-code', {
    config: { auth: { action: 'factory:Thing:Share', roles: WRITE } },
    schema: { tags: ['things'], summary: 'Issue a single-use access code with which another account joins this thing', params: thingIdParams, response: { 201: accessCodeSchema } },
  }, async (request, reply) => reply.code(201).send(await s.trust.issueAccessCode(accountOf(request), request.params.thingId)));
  app.post('/api/v1/things/join', {
    config: { auth: { action: 'factory:Thing:Join', roles: WRITE } },
    schema: { tags: ['things'], summary: 'Join a thing into the caller\'s account with an access code', body: joinSchema, response: { 200: joinedSchema } },
  }, async (request) => s.trust.join(accountOf(request), request.body.access_code));

  // --- thing lifecycle (the saga's PROVISION and FACTORY_DONE are not routes of their own here)
  app.get('/api/v1/things/resolve', {
    config: { auth: { action: 'factory:Thing:List', roles: READ } },
    schema: { tags: ['things'], summary: 'Find the caller\'s thing by model and serial (manufacturer when several match)', querystring: thingResolveQuery, response: { 200: thingResolvedSchema } },
  }, async (request) => s.lifecycle.resolve(scopeOf(request), request.query));
  app.get('/api/v1/things/:thingId/state', {
    config: { auth: { action: 'factory:Thing:ReadState', roles: READ } },
    schema: { tags: ['things'], summary: 'The thing\'s lifecycle state and when it last changed', params: thingIdParams, response: { 200: thingStateSchema } },
  }, async (request) => s.lifecycle.state(scopeOf(request), request.params.thingId));
  app.get('/api/v1/things/:thingId/factory-eligibility', {
    config: { auth: { action: 'factory:Thing:ReadFactoryEligibility', roles: READ } },
    schema: { tags: ['things'], summary: 'Whether the factory may still deliver to the thing (ROLLEDOFF to IN_FACTORY; factory-handover closes it)', params: thingIdParams, response: { 200: factoryEligibilitySchema } },
  }, async (request) => s.lifecycle.factoryEligibility(scopeOf(request), request.params.thingId));
  const steps = [
    ['factory-handover', 'FACTORY_HANDOVER', 'Handover', 'IN_FACTORY to HANDOVER_PENDING (closes new factory delivery eligibility)', WRITE],
    ['activate', 'ACTIVATE', 'Activate', 'HANDOVER_PENDING or DEACTIVATED to ACTIVATED', WRITE],
    ['deactivate', 'DEACTIVATE', 'Deactivate', 'ACTIVATED to DEACTIVATED', WRITE],
  ] as const;
  for (const [path, verb, action, summary, roles] of steps) {
    app.post(`/api/v1/things/:thingId/${path}`, {
      config: { auth: { action: `factory:Thing:${action}`, roles } },
      schema: { tags: ['things'], summary: `${summary}; 409 naming the current state otherwise`, params: thingIdParams, response: { 200: thingStateSchema } },
    }, async (request) => s.lifecycle.step(scopeOf(request), request.params.thingId, verb));
  }
  app.post('/api/v1/things/:thingId/annihilate', {
    config: { auth: { action: 'factory:Thing:Annihilate', roles: ADMIN } },
    schema: { tags: ['things'], summary: 'End the thing for good (ANNIHILATED) and revoke it like DELETE; 409 when already annihilated', params: thingIdParams, response: { 200: thingAnnihilatedSchema } },
  }, async (request) => s.lifecycle.annihilate(accountOf(request), request.params.thingId, principalOf(request).sub));

  // --- enrollments (the factory-side way in)
  app.post('/api/v1/enrollments', {
    config: { auth: { action: 'factory:Enrollment:Create', roles: WRITE } },
    schema: {
      tags: ['enrollments'], summary: 'Enroll a device from the factory: 201 births a thing in ROLLEDOFF with its certificate; 200 when the (model, serial) exists (its certificate)',
      body: enrollmentCreateSchema, response: { 200: enrollmentCreatedSchema, 201: enrollmentCreatedSchema },
    },
  }, async (request, reply) => {
    const { created, view } = await s.enrollments.create(scopeOf(request), request.body);
    return reply.code(created ? 201 : 200).send(view);
  });
  app.get('/api/v1/enrollments', {
    config: { auth: { action: 'factory:Enrollment:List', roles: READ } },
    schema: { tags: ['enrollments'], summary: "The account's enrollments (keyset pages by id; filters model_id, method)", querystring: enrollmentListQuery, response: { 200: enrollmentPageSchema } },
  }, async (request) => s.enrollments.list(scopeOf(request), request.query));
  app.get('/api/v1/enrollments/:id', {
    config: { auth: { action: 'factory:Enrollment:Read', roles: READ } },
    schema: { tags: ['enrollments'], summary: 'One enrollment (its id is the thing id)', params: idParams, response: { 200: enrollmentSchema } },
  }, async (request) => s.enrollments.get(scopeOf(request), request.params.id));

  // --- claim groups
  app.post('/api/v1/things/claim-groups', {
    config: { auth: { action: 'factory:ClaimGroup:Create', roles: WRITE } },
    schema: { tags: ['claim-groups'], summary: 'Create a claim group; the shared secret is shown once', body: claimGroupCreateSchema, response: { 201: claimGroupCreatedSchema } },
  }, async (request, reply) => reply.code(201).send(await s.trust.createClaimGroup(accountOf(request), request.body)));
  app.get('/api/v1/things/claim-groups/:id', {
    config: { auth: { action: 'factory:ClaimGroup:Read', roles: READ } },
    schema: { tags: ['claim-groups'], summary: 'Claim group status: consumed count; active, capped, expired or revoked', params: idParams, response: { 200: claimGroupSchema } },
  }, async (request) => s.trust.getClaimGroup(accountOf(request), request.params.id));
  app.delete('/api/v1/things/claim-groups/:id', {
    config: { auth: { action: 'factory:ClaimGroup:Revoke', roles: WRITE } },
    schema: { tags: ['claim-groups'], summary: 'Revoke the shared secret (issued certificates stay valid)', params: idParams, response: { 200: claimGroupSchema } },
  }, async (request) => s.trust.revokeClaimGroup(accountOf(request), request.params.id, principalOf(request).sub));

  // --- license approval (models with licenseApproval 'manual')
  app.get('/api/v1/licenses', {
    config: { auth: { action: 'factory:License:List', roles: READ } },
    schema: {
      tags: ['licenses'], summary: 'License decisions of the account\'s things (?status=pending: the approval queue; keyset pagination by id)',
      querystring: licenseListQuery, response: { 200: z.object({ items: z.array(licenseRecordSchema), next_cursor: z.string().nullable() }) },
    },
  }, async (request) => s.ddi.listLicenses(accountOf(request), request.query));
  app.post('/api/v1/licenses/:licenseId/approve', {
    config: { auth: { action: 'factory:License:Approve', roles: WRITE, capability: 'approve_licenses' } },
    schema: {
      tags: ['licenses'], summary: 'Approve a pending license request; the license is valid 30 days from now (409 when not pending or the thing is revoked)',
      params: licenseIdParams, response: { 200: licenseRecordSchema },
    },
  }, async (request) => s.ddi.approveLicense(accountOf(request), request.params.licenseId, principalOf(request).sub));
  app.post('/api/v1/licenses/:licenseId/deny', {
    config: { auth: { action: 'factory:License:Deny', roles: WRITE, capability: 'approve_licenses' } },
    schema: {
      tags: ['licenses'], summary: 'Deny a pending license request (409 when not pending)',
      params: licenseIdParams, body: licenseDenySchema.nullish(), response: { 200: licenseRecordSchema },
    },
  }, async (request) => s.ddi.denyLicense(accountOf(request), request.params.licenseId, principalOf(request).sub, request.body?.reason));

  // --- public PKI
  app.get('/api/v1/certificates/crl', {
    config: { auth: 'public' },
    schema: { tags: ['certificates'], summary: 'Device CA revocation list (DER)', response: { 200: z.any().describe('application/pkix-crl') } },
  }, async (_request, reply) => {
    const crl = await s.crl.current();
    return reply.type('application/pkix-crl').header('cache-control', 'no-cache').send(crl.der);
  });
  app.get('/api/v1/certificates/ca', {
    config: { auth: 'public' },
    schema: { tags: ['certificates'], summary: 'Device CA certificate (PEM); ?chain=true adds the root', querystring: z.strictObject({ chain: z.enum(['true', 'false']).optional() }), response: { 200: z.string() } },
  }, async (request, reply) => reply.type('application/x-pem-file').send(request.query.chain === 'true' ? gw.pki.bundlePem : gw.pki.deviceCaPem));
  app.get('/api/v1/certificates/root-crl', {
    config: { auth: 'public' },
    schema: { tags: ['certificates'], summary: 'Root CA revocation list (DER): with /crl, lets `openssl verify -crl_check_all` check the whole chain', response: { 200: z.any().describe('application/pkix-crl') } },
  }, async (_request, reply) => {
    if (!gw.pki.rootCrl) throw notFound('the root CA key is kept offline: this gateway publishes no root CRL');
    return reply.type('application/pkix-crl').header('cache-control', 'no-cache').send(await gw.pki.rootCrl.der());
  });
  app.get('/api/v1/certificates/license-jwks', {
    config: { auth: 'public' },
    schema: { tags: ['certificates'], summary: 'Public keys that verify device licenses (JWKS, ES256; current key first, then a rotated-out one)', response: { 200: licenseJwksSchema } },
  }, async (_request, reply) => reply.header('cache-control', 'public, max-age=300').send(gw.pki.licenseKeys.jwks));

  // --- device plane
  app.post('/ddi/v1/enroll', {
    config: { auth: 'public' },
    schema: { tags: ['devices'], summary: 'Enroll a device (every provisioning method)', body: enrollSchema, response: { 200: enrollmentResponseSchema } },
  }, async (request) => s.enrollment.enroll(request.body));
  app.get('/ddi/v1/:thingId/device/status', {
    config: { auth: DEVICE },
    schema: { tags: ['devices'], summary: 'Device status (enrollment token or mutual TLS)', params: thingIdParams, response: { 200: deviceStatusSchema } },
  }, async (request) => s.ddi.status(request.params.thingId));
  app.post('/ddi/v1/:thingId/license/request', {
    config: { auth: DEVICE },
    schema: {
      tags: ['devices'], summary: 'Request a license token (202 pending when the model needs tenant approval)',
      params: thingIdParams, body: licenseRequestSchema.nullish(), response: { 200: licenseSchema, 202: licensePendingSchema },
    },
  }, async (request, reply) => {
    const result = await s.ddi.requestLicense(request.params.thingId, request.body?.features);
    return 'license' in result ? reply.code(200).send(result) : reply.code(202).send(result);
  });
  app.get('/ddi/v1/:thingId/license/:licenseId', {
    config: { auth: DEVICE },
    schema: {
      tags: ['devices'], summary: 'Outcome of a license request: pending, granted (with the license) or denied (with the reason)',
      params: licenseParams, response: { 200: licenseStatusSchema },
    },
  }, async (request) => s.ddi.licenseStatus(request.params.thingId, request.params.licenseId));
  app.post('/ddi/v1/:thingId/license/renew', {
    config: { auth: DEVICE },
    schema: { tags: ['devices'], summary: 'Renew a license token', params: thingIdParams, body: licenseRenewSchema, response: { 200: licenseSchema } },
  }, async (request) => s.ddi.renewLicense(request.params.thingId, request.body.license));
  app.post('/ddi/v1/authn/emqx', {
    // the broker proves itself with the shared secret, not by its address
    config: { auth: { schemes: ['internal'] } },
    schema: { tags: ['devices'], summary: 'Broker authentication callback (X-Internal-Secret required)', body: emqxAuthnSchema, response: { 200: emqxResultSchema } },
  }, async (request) => ({ result: await s.ddi.authnEmqx(request.body) }));
}
