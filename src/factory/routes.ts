import { z } from 'zod';
import type { FastifyRequest } from 'fastify';
import type { ZodApp } from '../gateway.js';
import { accountOf, modelScopeOf, principalOf } from '../http/auth/plugin.js';
import type { ProvisioningSaga, SagaCaller } from './provisioning.js';
import type { Caller, FactoryServices } from './service.js';
import {
  createBody, factoryServiceSchema, idParams, legReportBody, listQuery, pageSchema, patchBody, policyBody, policySchema, provisionBody, runListQuery, runPageSchema, runSchema, thingParams, withSecretSchema,
} from './schemas.js';

/**
 * Which users may call what (docs/decisions.md): registering, changing, deleting and draining a
 * backend and setting its policy need a human admin of the account. Factory services (signed
 * requests) are judged by their policy instead of these roles (src/factory/policy.ts: by default
 * they read the account's services, health-check themselves and rotate their own credentials).
 */
const READ = ['admin', 'operator', 'viewer'];
const ADMIN = ['admin'];
const ROTATE = ['admin'];
const CHECK = ['admin', 'operator'];

const auth = (verb: string, roles: string[]) => ({ auth: { action: `factory:FactoryService:${verb}`, roles } });
const tags = ['factory-services'];

function callerOf(request: FastifyRequest): Caller {
  const p = principalOf(request);
  return { sub: p.sub, accountId: accountOf(request), factoryServiceId: p.factoryService?.id };
}

export async function factoryRoutes(app: ZodApp, services: FactoryServices): Promise<void> {
  app.get('/api/v1/factory-services', {
    config: auth('List', READ),
    schema: { tags, summary: "List the account's factory services (keyset pages; filters role, state, registrar, model)", querystring: listQuery, response: { 200: pageSchema } },
  }, async (request) => services.list(callerOf(request), request.query));

  app.post('/api/v1/factory-services', {
    config: auth('Create', ADMIN),
    schema: {
      tags, summary: 'Register a factory service: returns its access key id and secret once (409 when the model already has an active service of that role)',
      body: createBody, response: { 201: withSecretSchema },
    },
  }, async (request, reply) => reply.code(201).send(await services.create(callerOf(request), request.body)));

  app.get('/api/v1/factory-services/:id', {
    config: auth('Read', READ),
    schema: { tags, summary: 'Read a factory service', params: idParams, response: { 200: factoryServiceSchema } },
  }, async (request) => services.get(callerOf(request), request.params.id));

  app.patch('/api/v1/factory-services/:id', {
    config: auth('Update', ADMIN),
    schema: { tags, summary: 'Change the endpoint_url (the only changeable field)', params: idParams, body: patchBody, response: { 200: factoryServiceSchema } },
  }, async (request) => services.update(callerOf(request), request.params.id, request.body.endpoint_url));

  app.delete('/api/v1/factory-services/:id', {
    config: auth('Delete', ADMIN),
    schema: { tags, summary: 'Soft delete: the credentials stop working; drain and garbage collection follow', params: idParams, response: { 204: z.null().describe('soft-deleted') } },
  }, async (request, reply) => {
    await services.delete(callerOf(request), request.params.id);
    return reply.code(204).send(null);
  });

  app.post('/api/v1/factory-services/:id/rotate-credentials', {
    config: auth('RotateCredentials', ROTATE),
    schema: {
      tags, summary: 'New secret_access_key, shown once; the old secret keeps working until confirm-rotation (a factory service rotates only its own)',
      params: idParams, response: { 200: withSecretSchema },
    },
  }, async (request) => services.rotate(callerOf(request), request.params.id));

  app.post('/api/v1/factory-services/:id/confirm-rotation', {
    config: auth('ConfirmRotation', ROTATE),
    schema: { tags, summary: 'Retire the old secret (409 when no rotation is pending)', params: idParams, response: { 200: factoryServiceSchema } },
  }, async (request) => services.confirmRotation(callerOf(request), request.params.id));

  app.post('/api/v1/factory-services/:id/health-check', {
    config: auth('HealthCheck', CHECK),
    schema: {
      tags, summary: 'Probe endpoint_url + /healthz now and record last_health_check_* (400 for loopback, link-local and private targets)',
      params: idParams, response: { 200: factoryServiceSchema },
    },
  }, async (request) => services.healthCheck(callerOf(request), request.params.id));

  app.get('/api/v1/factory-services/:id/policy', {
    config: auth('GetPolicy', READ),
    schema: {
      tags, summary: "The service's policy: the factory:<Resource>:<Verb> actions its signed requests may call (default: true while it is its role's default)",
      params: idParams, response: { 200: policySchema },
    },
  }, async (request) => services.policy(callerOf(request), request.params.id));

  app.put('/api/v1/factory-services/:id/policy', {
    config: auth('PutPolicy', ADMIN),
    schema: {
      tags, summary: "Replace the service's policy with `allow` (400 naming an unknown action or one never granted to a service; 409 once soft-deleted); every node applies it at once",
      params: idParams, body: policyBody, response: { 200: policySchema },
    },
  }, async (request) => services.setPolicy(callerOf(request), request.params.id, request.body.allow));

  app.delete('/api/v1/factory-services/:id/policy', {
    config: auth('PutPolicy', ADMIN),
    schema: { tags, summary: "Back to the role's default policy (200 with it)", params: idParams, response: { 200: policySchema } },
  }, async (request) => services.setPolicy(callerOf(request), request.params.id, null));

  app.post('/api/v1/factory-services/:id/expedite-drain', {
    config: auth('Drain', ADMIN),
    schema: { tags, summary: 'Hard-delete a soft-deleted service now (409 while active saga legs reference it)', params: idParams, response: { 204: z.null().describe('hard-deleted') } },
  }, async (request, reply) => {
    await services.expediteDrain(callerOf(request), request.params.id);
    return reply.code(204).send(null);
  });
}

const RUN_READ = ['admin', 'operator', 'viewer'];
const PROVISION = ['admin', 'operator'];
/** the backend reports legs (by its policy); an admin may report for a factory without a backend of its own */
const REPORT = ['admin'];

function sagaCallerOf(request: FastifyRequest): SagaCaller {
  const p = principalOf(request);
  return { scope: { accountId: accountOf(request), modelId: modelScopeOf(request) }, sub: p.sub, factoryServiceId: p.factoryService?.id };
}

/** The PROVISION saga: start it, the backend's leg reports, the runs. */
export async function provisioningRoutes(app: ZodApp, saga: ProvisioningSaga): Promise<void> {
  app.post('/api/v1/things/:thingId/provision', {
    config: { auth: { action: 'factory:Thing:Provision', roles: PROVISION } },
    schema: {
      tags: ['things'], summary: "ROLLEDOFF to PROVISIONED and a PROVISION saga: 202 with the run; its legs call the model's factory services (409 in another state or without a provision-role service)",
      params: thingParams, body: provisionBody, response: { 202: runSchema },
    },
  }, async (request, reply) => {
    const run = await saga.start(sagaCallerOf(request), request.params.thingId);
    return reply.code(202).header('location', `/api/v1/provisioning-runs/${run.id}`).send(run);
  });

  app.post('/api/v1/things/:thingId/provisioning-result', {
    config: { auth: { action: 'factory:Thing:Provision', roles: REPORT } },
    schema: {
      tags: ['things'], summary: "The factory backend reports a leg of the thing's PROVISION saga (404 unknown thing or run; 409 when the leg is finished or not dispatched)",
      params: thingParams, body: legReportBody, response: { 200: runSchema },
    },
  }, async (request) => saga.report(sagaCallerOf(request), request.params.thingId, request.body));

  app.get('/api/v1/provisioning-runs', {
    config: { auth: { action: 'factory:ProvisioningRun:List', roles: RUN_READ } },
    schema: { tags: ['provisioning-runs'], summary: "The account's PROVISION saga runs with their legs (keyset pages by id; filters thing_id, state)", querystring: runListQuery, response: { 200: runPageSchema } },
  }, async (request) => saga.list(sagaCallerOf(request).scope, request.query));

  app.get('/api/v1/provisioning-runs/:id', {
    config: { auth: { action: 'factory:ProvisioningRun:Read', roles: RUN_READ } },
    schema: { tags: ['provisioning-runs'], summary: 'One run: each leg with its attempts, times and outcomes', params: idParams, response: { 200: runSchema } },
  }, async (request) => saga.get(sagaCallerOf(request).scope, request.params.id));
}
