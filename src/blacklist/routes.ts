import { z } from 'zod';
import type { FastifyRequest } from 'fastify';
import type { ZodApp } from '../gateway.js';
import { principalOf } from '../http/auth/plugin.js';
import type { Es256Keys } from '../pki/keys.js';
import { unavailable } from '../lib/errors.js';
import type { BlacklistService, Caller } from './service.js';
import type { SnapshotStore } from './snapshot.js';
import { addBody, addedSchema, checkQuery, deltasQuery, deltasSchema, entryParams, entrySchema, jwksSchema, jwsSchema, listQuery, pageSchema } from './schemas.js';

/**
 * Who may call what (docs/decisions.md): reading the global list (list, check, deltas, signed
 * snapshot) is open to every user of an account, to factory services (SVC-HMAC-SHA256 signed
 * requests, by their policy: src/factory/policy.ts) and to platform operators; adding
 * and removing entries needs a platform operator or an admin of the account that owns the model
 * (the service checks the ownership).
 */
const READ = ['admin', 'operator', 'viewer', 'platform-admin', 'platform-operator'];
const MANAGE = ['admin', 'platform-admin', 'platform-operator'];

const auth = (verb: string, roles: string[]) => ({ auth: { action: `factory:IdentityBlacklist:${verb}`, roles } });
const tags = ['identity-blacklist'];
export const BASE = '/api/v1/identity-blacklist';
export const JWKS_PATH = `${BASE}/jwks.json`;

function callerOf(request: FastifyRequest): Caller {
  const p = principalOf(request);
  return { sub: p.sub, accountId: p.accountId, platform: p.realmKind === 'platform' };
}

export async function blacklistRoutes(app: ZodApp, service: BlacklistService, snapshots: SnapshotStore, keys: Es256Keys): Promise<void> {
  app.get(BASE, {
    config: auth('List', READ),
    schema: { tags, summary: 'Active entries, sorted by model, sn (keyset pages)', querystring: listQuery, response: { 200: pageSchema } },
  }, async (request) => service.list(request.query));

  app.post(BASE, {
    config: auth('Add', MANAGE),
    schema: {
      tags, summary: "Blacklist a (model, sn): enrollment refuses it from now on and the identity's enrolled things are revoked (409 when listed already)",
      body: addBody, response: { 201: addedSchema },
    },
  }, async (request, reply) => reply.code(201).send(await service.add(callerOf(request), request.body)));

  app.get(`${BASE}/check`, {
    config: auth('Check', READ),
    schema: {
      tags, summary: 'Is a serial on the global blacklist? 200 with the entry, 404 when not listed (model accepted for compatibility)',
      querystring: checkQuery, response: { 200: entrySchema },
    },
  }, async (request) => service.check(request.query.sn, request.query.model));

  app.get(`${BASE}/deltas`, {
    config: auth('ListDeltas', READ),
    schema: {
      tags, summary: 'Adds and removes after a cursor, oldest first (400 malformed cursor; 410 when older than 72 hours: fetch snapshot.signed)',
      querystring: deltasQuery, response: { 200: deltasSchema },
    },
  }, async (request) => service.deltas(request.query.cursor, request.query.limit));

  app.get(`${BASE}/snapshot.signed`, {
    config: auth('GetSnapshot', READ),
    schema: {
      tags,
      summary: `The whole active list as a JWS (application/jose+json, ES256, keys at ${JWKS_PATH}); rebuilt on change; 503 while none was built`,
      response: { 200: { content: { 'application/jose+json': { schema: jwsSchema } } }, 304: z.null().describe('If-None-Match names the current snapshot') },
    },
  }, async (request, reply) => {
    const current = await snapshots.current();
    if (!current) throw unavailable('no signed snapshot of the identity blacklist has been built yet; retry shortly', { retryAfterSeconds: 5 });
    const etag = `"${current.seq}"`;
    reply.header('etag', etag).header('cache-control', 'no-cache');
    if (request.headers['if-none-match'] === etag) return reply.code(304).send(null);
    // stored serialized (a JSON string of the schema's shape): Fastify sends a string as is
    return reply.type('application/jose+json').send(current.jws as unknown as z.infer<typeof jwsSchema>);
  });

  app.get(JWKS_PATH, {
    config: { auth: 'public' },
    schema: { tags, summary: 'Public keys (JWKS) that verify snapshot.signed, current first', response: { 200: jwksSchema } },
  }, async (_request, reply) => reply.header('cache-control', 'public, max-age=300').send(keys.jwks));

  app.delete(`${BASE}/:model/:sn`, {
    config: auth('Remove', MANAGE),
    schema: {
      tags, summary: 'Take a (model, sn) off the blacklist (404 when not listed); things revoked by it stay revoked',
      params: entryParams, response: { 204: z.null().describe('removed') },
    },
  }, async (request, reply) => {
    await service.remove(callerOf(request), request.params.model, request.params.sn);
    return reply.code(204).send(null);
  });
}
