import { z } from 'zod';
import type { ZodApp } from '../gateway.js';
import type { FastifyRequest } from 'fastify';
import { accountOf, modelScopeOf, principalOf } from '../http/auth/plugin.js';
import { notFound } from '../lib/errors.js';
import { PLATFORM_ROLES } from '../http/auth/principal.js';
import type { Clock } from '../lib/clock.js';
import type { ModelService } from './models.js';
import { internalModelCreateSchema, modelImportBody, modelPatchSchema, modelShareBody, modelShareSchema, softwareSchema } from './modelSchemas.js';
import { modelCreatedSchema, modelSchema } from './schemas.js';

const READ = ['admin', 'operator', 'viewer'];
const WRITE = ['admin', 'operator'];
const ADMIN = ['admin'];
const tags = ['models'];
const idParams = z.object({ id: z.uuid() });
const auth = (verb: string, roles: readonly string[]) => ({ auth: { action: `factory:Model:${verb}`, roles } });

/**
 * A factory service reaches its own model only (docs/decisions.md, "Factory-service policies"):
 * any other reads as absent, as another account's does. Users of the account are not narrowed.
 */
export function modelInScope(request: FastifyRequest, id: string): void {
  const scope = modelScopeOf(request);
  if (scope !== undefined && scope !== id.toLowerCase()) throw notFound(`model ${id} not found`);
}

/** GET /api/v1/models: the account's models; a factory service's own model only. */
export async function listModels(models: ModelService, request: FastifyRequest, limit: number, after?: string): Promise<Awaited<ReturnType<ModelService['list']>>> {
  const scope = modelScopeOf(request);
  if (scope === undefined) return models.list(accountOf(request), limit, after);
  if (after !== undefined && after.toLowerCase() >= scope) return { items: [], next_cursor: null };
  return { items: [await models.get(accountOf(request), scope)], next_cursor: null };
}

/** GET /api/v1/models/{id}, within the caller's scope. */
export function readModel(models: ModelService, request: FastifyRequest, id: string): ReturnType<ModelService['get']> {
  modelInScope(request, id);
  return models.get(accountOf(request), id);
}

/**
 * The model routes of the factory surface, part 2 (create, list and read stay in routes.ts):
 * PATCH, DELETE, share, import, software bundles, and internal models for platform operators.
 */
export async function modelRoutes(app: ZodApp, models: ModelService, clock: Clock): Promise<void> {
  app.patch('/api/v1/models/:id', {
    config: auth('Update', WRITE),
    schema: { tags, summary: 'Change name, description, licenseApproval or the software/driver bundles (the vid:pid descriptor and the provisioning method are fixed)', params: idParams, body: modelPatchSchema, response: { 200: modelSchema } },
  }, async (request) => {
    modelInScope(request, request.params.id);
    return models.update(accountOf(request), request.params.id, request.body);
  });

  app.delete('/api/v1/models/:id', {
    config: auth('Delete', ADMIN),
    schema: { tags, summary: 'Delete a model (409 while things, factory services, provisioning runs or registrars use it)', params: idParams, response: { 204: z.null().describe('deleted') } },
  }, async (request, reply) => {
    modelInScope(request, request.params.id);
    await models.delete(accountOf(request), request.params.id);
    return reply.code(204).send(null);
  });

  app.post('/api/v1/models/:id/share', {
    config: auth('Share', WRITE),
    schema: { tags, summary: 'A share deeplink to the public descriptor only (token shown once)', params: idParams, body: modelShareBody, response: { 201: modelShareSchema } },
  }, async (request, reply) => {
    modelInScope(request, request.params.id);
    return reply.code(201).send(await models.share(accountOf(request), request.params.id, principalOf(request).sub, request.body?.expires_in_seconds, clock.now()));
  });

  app.post('/api/v1/models/import', {
    config: auth('Import', WRITE),
    schema: {
      tags, summary: 'Import a shared descriptor by its deeplink (400 malformed or expired, 404 unknown, 409 already imported or your own)',
      body: modelImportBody, response: { 201: modelSchema },
    },
  }, async (request, reply) => reply.code(201).send(await models.import(accountOf(request), request.body, clock.now())));

  app.get('/api/v1/models/:id/software', {
    config: auth('Read', READ),
    schema: { tags, summary: 'Software and driver bundles of the descriptor (owner and importers)', params: idParams, response: { 200: softwareSchema } },
  }, async (request) => {
    modelInScope(request, request.params.id);
    return models.software(accountOf(request), request.params.id);
  });

  app.post('/api/v1/internal/models', {
    config: auth('CreateInternal', PLATFORM_ROLES),
    schema: {
      tags, summary: 'Create an INTERNAL model of an account (platform operators): resolvable for provisioning, never listed (404 unknown account, 409 duplicate descriptor)',
      body: internalModelCreateSchema, response: { 201: modelCreatedSchema },
    },
  }, async (request, reply) => {
    const { account_id: accountId, ...input } = request.body as z.infer<typeof internalModelCreateSchema> & { account_id: string };
    return reply.code(201).send(await models.create(accountId, input, { internal: true }));
  });
}
