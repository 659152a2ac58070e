import type { FastifyRequest } from 'fastify';
import type { ZodApp } from '../gateway.js';
import { accountOf, principalOf } from '../http/auth/plugin.js';
import { PLATFORM_ROLES } from '../http/auth/principal.js';
import { accountOfCaller, type Caller } from './caller.js';
import type { RegistryServices } from './index.js';
import * as s from './schemas.js';

/**
 * Who may call what (docs/decisions.md): account users read (viewer and up); operators and
 * admins create; admins delete and decide what other accounts get. Platform staff approve
 * registrars and factory registrations. Factory services (signed requests) are judged by their
 * policy instead of these roles (src/factory/policy.ts; by default they read).
 */
const READ = ['admin', 'operator', 'viewer'];
const WRITE = ['admin', 'operator'];
const ADMIN = ['admin'];
const PLATFORM = [...PLATFORM_ROLES];
const auth = (action: string, roles: readonly string[]) => ({ auth: { action: `factory:${action}`, roles } });

/** Platform tokens act on no account; everyone else on the account of the request. */
export function callerOf(request: FastifyRequest): Caller {
  const p = principalOf(request);
  if (p.realmKind === 'platform') return { sub: p.sub, platform: true };
  return { sub: p.sub, accountId: accountOf(request), platform: false };
}

export async function registryRoutes(app: ZodApp, r: RegistryServices): Promise<void> {
  // --- vendors
  app.post('/api/v1/vendors', {
    config: auth('Vendor:Assign', ADMIN),
    schema: { tags: ['vendors'], summary: "Assign the account's VID namespace, or fetch it when assigned (201 either way)", body: s.vendorBody, response: { 201: s.vendorSchema } },
  }, async (request, reply) => {
    const c = callerOf(request);
    return reply.code(201).send((await r.vendors.assign(accountOfCaller(c), c.sub)).vendor);
  });
  app.get('/api/v1/vendors', {
    config: auth('Vendor:Read', READ),
    schema: { tags: ['vendors'], summary: "The account's VID namespace (404 before assignment)", response: { 200: s.vendorSchema } },
  }, async (request) => r.vendors.get(accountOfCaller(callerOf(request))));

  // --- registrars
  const rt = ['registrars'];
  app.post('/api/v1/registrars', {
    config: auth('Registrar:Create', WRITE),
    schema: { tags: rt, summary: 'Create a registrar, PENDING until a platform operator decides (403 without an approved factory registration)', body: s.registrarCreateBody, response: { 201: s.registrarSchema } },
  }, async (request, reply) => reply.code(201).send(await r.registrars.create(callerOf(request), request.body)));
  app.get('/api/v1/registrars', {
    config: auth('Registrar:List', [...READ, ...PLATFORM]),
    schema: { tags: rt, summary: "The account's registrars; every account's for platform staff (keyset pages by id; filter state)", querystring: s.registrarListQuery, response: { 200: s.registrarPage } },
  }, async (request) => r.registrars.list(callerOf(request), request.query));
  app.get('/api/v1/registrars/:id', {
    config: auth('Registrar:Read', [...READ, ...PLATFORM]),
    schema: { tags: rt, summary: 'Read a registrar', params: s.idParams, response: { 200: s.registrarSchema } },
  }, async (request) => r.registrars.get(callerOf(request), request.params.id));
  app.patch('/api/v1/registrars/:id', {
    config: auth('Registrar:Update', WRITE),
    schema: { tags: rt, summary: 'Change name or description', params: s.idParams, body: s.registrarPatchBody, response: { 200: s.registrarSchema } },
  }, async (request) => r.registrars.update(callerOf(request), request.params.id, request.body));
  app.delete('/api/v1/registrars/:id', {
    config: auth('Registrar:Delete', ADMIN),
    schema: { tags: rt, summary: 'Delete a registrar (its standing reference requests are revoked)', params: s.idParams, response: { 204: s.nothing } },
  }, async (request, reply) => {
    await r.registrars.delete(callerOf(request), request.params.id);
    return reply.code(204).send(null);
  });
  app.post('/api/v1/registrars/:id/approve', {
    config: auth('Registrar:Approve', PLATFORM),
    schema: { tags: rt, summary: 'Approve a PENDING registrar (platform operator; 409 otherwise)', params: s.idParams, body: s.optionalReasonBody, response: { 200: s.registrarSchema } },
  }, async (request) => r.registrars.decide(callerOf(request), request.params.id, 'APPROVE'));
  app.post('/api/v1/registrars/:id/reject', {
    config: auth('Registrar:Reject', PLATFORM),
    schema: { tags: rt, summary: 'Reject a PENDING registrar (platform operator; 409 otherwise)', params: s.idParams, body: s.optionalReasonBody, response: { 200: s.registrarSchema } },
  }, async (request) => r.registrars.decide(callerOf(request), request.params.id, 'REJECT', request.body?.reason));
  app.put('/api/v1/registrars/:id/canonical-model', {
    config: auth('Registrar:Update', WRITE),
    schema: {
      tags: rt, summary: 'Bind the canonical model once (the same model again: 200; another model: 409; not your model: 400)',
      params: s.idParams, body: s.canonicalModelBody, response: { 200: s.registrarSchema },
    },
  }, async (request) => r.registrars.setCanonicalModel(callerOf(request), request.params.id, request.body.model_id));

  // --- access requests
  const at = ['access-requests'];
  app.post('/api/v1/access-requests', {
    config: auth('AccessRequest:Create', WRITE),
    schema: { tags: at, summary: "Ask the owner of another account's approved registrar for access (409 while one is pending)", body: s.accessRequestCreateBody, response: { 201: s.accessRequestSchema } },
  }, async (request, reply) => reply.code(201).send(await r.accessRequests.create(callerOf(request), request.body)));
  app.get('/api/v1/access-requests', {
    config: auth('AccessRequest:List', READ),
    schema: { tags: at, summary: 'Access requests against your registrars and yours (filters role, state; keyset pages)', querystring: s.accessRequestListQuery, response: { 200: s.accessRequestPage } },
  }, async (request) => r.accessRequests.list(callerOf(request), request.query));
  app.get('/api/v1/access-requests/:id', {
    config: auth('AccessRequest:Read', READ),
    schema: { tags: at, summary: 'Read an access request (its requester and owner only)', params: s.idParams, response: { 200: s.accessRequestSchema } },
  }, async (request) => r.accessRequests.get(callerOf(request), request.params.id));
  app.post('/api/v1/access-requests/:id/approve', {
    config: auth('AccessRequest:Approve', ADMIN),
    schema: { tags: at, summary: 'Decide APPROVED (the owner; 409 once decided)', params: s.idParams, body: s.optionalReasonBody, response: { 200: s.accessRequestSchema } },
  }, async (request) => r.accessRequests.decide(callerOf(request), request.params.id, 'APPROVED', request.body?.reason));
  app.post('/api/v1/access-requests/:id/reject', {
    config: auth('AccessRequest:Reject', ADMIN),
    schema: { tags: at, summary: 'Decide REJECTED (the owner; 409 once decided)', params: s.idParams, body: s.optionalReasonBody, response: { 200: s.accessRequestSchema } },
  }, async (request) => r.accessRequests.decide(callerOf(request), request.params.id, 'REJECTED', request.body?.reason));
  app.post('/api/v1/access-requests/:id/decide', {
    config: auth('AccessRequest:Decide', ADMIN),
    schema: { tags: at, summary: 'Decide with `decision`: APPROVED or REJECTED (the owner; 409 once decided)', params: s.idParams, body: s.decideBody, response: { 200: s.accessRequestSchema } },
  }, async (request) => r.accessRequests.decide(callerOf(request), request.params.id, request.body.decision, request.body.reason));

  // --- factory registrations
  const ft = ['factory-registrations'];
  app.post('/api/v1/factory-registrations', {
    config: auth('FactoryRegistration:Request', ADMIN),
    schema: { tags: ft, summary: 'Request the factory registration (201 the first time; 200 with the current one, or asked again after a refusal or revocation)', body: s.registrationBody, response: { 200: s.registrationSchema, 201: s.registrationSchema } },
  }, async (request, reply) => {
    const { registration, created } = await r.factoryRegistrations.request(callerOf(request), request.body?.note);
    return reply.code(created ? 201 : 200).send(registration);
  });
  app.get('/api/v1/factory-registrations/me', {
    config: auth('FactoryRegistration:Read', READ),
    schema: { tags: ft, summary: "The account's factory registration (404 before a request)", response: { 200: s.registrationSchema } },
  }, async (request) => r.factoryRegistrations.me(callerOf(request)));
  app.get('/api/v1/factory-registrations/pending', {
    config: auth('FactoryRegistration:List', PLATFORM),
    schema: { tags: ft, summary: 'The platform operator queue: REQUESTED registrations, oldest first', querystring: s.registrationQueueQuery, response: { 200: s.registrationPage } },
  }, async (request) => r.factoryRegistrations.pending(callerOf(request), request.query));
  for (const [verb, event] of [['approve', 'APPROVE'], ['refuse', 'REFUSE'], ['revoke', 'REVOKE']] as const) {
    app.post(`/api/v1/factory-registrations/:account_id/${verb}`, {
      config: auth(`FactoryRegistration:${verb[0].toUpperCase()}${verb.slice(1)}`, PLATFORM),
      schema: {
        tags: ft, summary: `${verb[0].toUpperCase()}${verb.slice(1)} an account's factory registration (platform operator; 404 never requested, 409 wrong state)`,
        params: s.accountParams, body: s.optionalReasonBody, response: { 200: s.registrationSchema },
      },
    }, async (request) => r.factoryRegistrations.decide(callerOf(request), request.params.account_id, event, request.body?.reason));
  }

  // --- eligibility artifacts and grants
  const et = ['eligibility'];
  app.post('/api/v1/eligibility-artifacts', {
    config: auth('EligibilityArtifact:Create', ADMIN),
    schema: { tags: et, summary: 'A revocable, expiring token with a shareable URL (shown once)', body: s.artifactCreateBody, response: { 201: s.artifactCreatedSchema } },
  }, async (request, reply) => reply.code(201).send(await r.eligibility.createArtifact(callerOf(request), request.body ?? {})));
  app.get('/api/v1/eligibility-artifacts', {
    config: auth('EligibilityArtifact:List', READ),
    schema: { tags: et, summary: "The account's artifacts (keyset pages; tokens are not shown again)", querystring: s.pageQuery, response: { 200: s.artifactPage } },
  }, async (request) => r.eligibility.listArtifacts(callerOf(request), request.query));
  app.post('/api/v1/eligibility-artifacts/redeem', {
    config: auth('EligibilityArtifact:Redeem', ADMIN),
    schema: { tags: et, summary: "Redeem another account's artifact: a PENDING grant (400 malformed, expired, revoked or your own; 404 unknown)", body: s.redeemBody, response: { 201: s.grantSchema } },
  }, async (request, reply) => reply.code(201).send(await r.eligibility.redeem(callerOf(request), request.body)));
  app.get('/api/v1/eligibility-artifacts/:id', {
    config: auth('EligibilityArtifact:Read', READ),
    schema: { tags: et, summary: 'Read an artifact (404 for other accounts)', params: s.idParams, response: { 200: s.artifactSchema } },
  }, async (request) => r.eligibility.getArtifact(callerOf(request), request.params.id));
  app.delete('/api/v1/eligibility-artifacts/:id', {
    config: auth('EligibilityArtifact:Revoke', ADMIN),
    schema: { tags: et, summary: 'Revoke an artifact: it redeems no more', params: s.idParams, response: { 204: s.nothing } },
  }, async (request, reply) => {
    await r.eligibility.revokeArtifact(callerOf(request), request.params.id);
    return reply.code(204).send(null);
  });
  app.get('/api/v1/eligibility-grants', {
    config: auth('EligibilityGrant:List', READ),
    schema: { tags: et, summary: "The owner's grant inbox (filter state; role=requester for the grants you asked for)", querystring: s.grantListQuery, response: { 200: s.grantPage } },
  }, async (request) => r.eligibility.listGrants(callerOf(request), request.query));
  app.post('/api/v1/eligibility-grants/:id/approve', {
    config: auth('EligibilityGrant:Approve', ADMIN),
    schema: { tags: et, summary: 'Approve a PENDING grant: the requester becomes an eligible accessor (404 not yours, 409 decided)', params: s.idParams, body: s.optionalReasonBody, response: { 200: s.grantSchema } },
  }, async (request) => r.eligibility.decideGrant(callerOf(request), request.params.id, { type: 'APPROVE' }));
  app.post('/api/v1/eligibility-grants/:id/reject', {
    config: auth('EligibilityGrant:Reject', ADMIN),
    schema: { tags: et, summary: 'Reject a PENDING grant with a reason (400 without one)', params: s.idParams, body: s.reasonBody, response: { 200: s.grantSchema } },
  }, async (request) => r.eligibility.decideGrant(callerOf(request), request.params.id, { type: 'REJECT', reason: request.body.reason }));

  // --- reference requests and thing references
  const qt = ['reference-requests'];
  app.post('/api/v1/reference-requests', {
    config: auth('ReferenceRequest:Create', WRITE),
    schema: { tags: qt, summary: "A standing filter over another account's registrar (403 without approved eligibility; 400 unknown or unapproved registrar)", body: s.referenceRequestCreateBody, response: { 201: s.referenceRequestSchema } },
  }, async (request, reply) => reply.code(201).send(await r.references.create(callerOf(request), request.body)));
  app.get('/api/v1/reference-requests', {
    config: auth('ReferenceRequest:List', READ),
    schema: { tags: qt, summary: "The requester's own requests (filter state)", querystring: s.referenceRequestListQuery, response: { 200: s.referenceRequestPage } },
  }, async (request) => r.references.list(callerOf(request), { ...request.query, role: 'requester' }));
  app.get('/api/v1/reference-requests/inbox', {
    config: auth('ReferenceRequest:ListInbox', READ),
    schema: { tags: qt, summary: "Requests against the owner's registrars (filter state)", querystring: s.referenceRequestListQuery, response: { 200: s.referenceRequestPage } },
  }, async (request) => r.references.list(callerOf(request), { ...request.query, role: 'owner' }));
  app.get('/api/v1/reference-requests/:id', {
    config: auth('ReferenceRequest:Read', READ),
    schema: { tags: qt, summary: 'Read a request (its requester and owner; 404 for other accounts)', params: s.idParams, response: { 200: s.referenceRequestSchema } },
  }, async (request) => r.references.get(callerOf(request), request.params.id));
  app.delete('/api/v1/reference-requests/:id', {
    config: auth('ReferenceRequest:Revoke', WRITE),
    schema: { tags: qt, summary: 'Stop the standing request (requester or owner); the references it made are removed', params: s.idParams, response: { 204: s.nothing } },
  }, async (request, reply) => {
    await r.references.revoke(callerOf(request), request.params.id);
    return reply.code(204).send(null);
  });
  app.post('/api/v1/reference-requests/:id/approve', {
    config: auth('ReferenceRequest:Approve', ADMIN),
    schema: { tags: qt, summary: 'Approve (the owner): the initial reconcile runs; matching things enrolled later keep appearing', params: s.idParams, body: s.optionalReasonBody, response: { 200: s.referenceRequestDecidedSchema } },
  }, async (request) => r.references.decide(callerOf(request), request.params.id, { type: 'APPROVE' }));
  app.post('/api/v1/reference-requests/:id/reject', {
    config: auth('ReferenceRequest:Reject', ADMIN),
    schema: { tags: qt, summary: 'Reject (the owner) with a reason (400 without one)', params: s.idParams, body: s.reasonBody, response: { 200: s.referenceRequestDecidedSchema } },
  }, async (request) => r.references.decide(callerOf(request), request.params.id, { type: 'REJECT', reason: request.body.reason }));
  app.get('/api/v1/thing-references', {
    config: auth('ThingReference:List', READ),
    schema: { tags: qt, summary: "Things of other accounts in the caller's repository (from reference requests and device deeplinks)", querystring: s.thingReferenceQuery, response: { 200: s.thingReferencePage } },
  }, async (request) => r.references.listReferences(callerOf(request), request.query));

  // --- device deeplinks
  const dt = ['device-deeplinks'];
  app.post('/api/v1/device-deeplinks', {
    config: auth('DeviceDeeplink:Create', WRITE),
    schema: { tags: dt, summary: 'A single-thing token with an encodable URL (400 not your thing)', body: s.deeplinkCreateBody, response: { 201: s.deeplinkCreatedSchema } },
  }, async (request, reply) => reply.code(201).send(await r.deeplinks.create(callerOf(request), request.body)));
  app.get('/api/v1/device-deeplinks', {
    config: auth('DeviceDeeplink:List', READ),
    schema: { tags: dt, summary: "The account's device deeplinks (keyset pages)", querystring: s.pageQuery, response: { 200: s.deeplinkPage } },
  }, async (request) => r.deeplinks.list(callerOf(request), request.query));
  app.delete('/api/v1/device-deeplinks/:id', {
    config: auth('DeviceDeeplink:Delete', WRITE),
    schema: { tags: dt, summary: 'Delete a deeplink: its token stops working (references made stay)', params: s.idParams, response: { 204: s.nothing } },
  }, async (request, reply) => {
    await r.deeplinks.delete(callerOf(request), request.params.id);
    return reply.code(204).send(null);
  });
  app.post('/api/v1/device-deeplinks/redeem', {
    config: auth('DeviceDeeplink:Redeem', WRITE),
    schema: { tags: dt, summary: "One thing_reference in the caller's repository (400 bad or expired token, 404 unknown)", body: s.redeemBody, response: { 200: s.thingReferenceSchema } },
  }, async (request) => r.deeplinks.redeem(callerOf(request), request.body));
}
