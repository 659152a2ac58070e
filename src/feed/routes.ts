import { z } from 'zod';
import type { FastifyRequest } from 'fastify';
import type { ZodApp } from '../gateway.js';
import { accountOf, principalOf } from '../http/auth/plugin.js';
import { invalid } from '../lib/errors.js';
import type { StateChangeFeed } from './feed.js';
import type { Caller, Subscriptions } from './subscriptions.js';
import {
  createBody, createdSchema, feedPageSchema, feedQuery, idParams, listQuery, patchBody, subscriptionPageSchema, subscriptionSchema, thingsPageSchema, thingsQuery,
} from './schemas.js';

/**
 * The /provisioning/v1 edge: the state-change feed, the full sync of things and state-change
 * subscriptions. Factory services call with signed requests, judged by their policy
 * (src/factory/policy.ts; their registrar, if any, scopes what they see); users of the account
 * with bearer tokens or SVC credentials, by these roles.
 */
const READ = ['admin', 'operator', 'viewer'];
const WRITE = ['admin', 'operator'];
const tags = ['state-changes'];

const auth = (action: string, roles: string[]) => ({ auth: { action: `factory:${action}`, roles } });

function callerOf(request: FastifyRequest): Caller {
  const p = principalOf(request);
  return { sub: p.sub, accountId: accountOf(request), registrarId: p.factoryService?.registrarId ?? null };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Validation failures the spec gives a code of its own become that coded problem; any other
 * stays the plain 400 (routes validate with `attachValidation` so they can tell which).
 */
function feedValidation(request: FastifyRequest): void {
  const err = request.validationError;
  if (!err) return;
  const query = request.query as Record<string, unknown>;
  if (isObject(query) && query.registrar_id !== undefined) {
    throw invalid('registrar_id must not be sent: the registrar comes from the signed identity (the calling factory service)', { code: 'THM-50100', type: 'feed-registrar-id-sent' });
  }
  const onSince = (err.validation ?? []).some((v: { instancePath: string }) => /since/.test(v.instancePath));
  if (isObject(query) && query.since !== undefined && onSince) {
    throw invalid('since: the cursor is not one this feed issued; resume from the next_cursor of an earlier page, or omit since to start from the beginning', { code: 'THM-50110', type: 'feed-cursor-malformed', title: 'Malformed cursor' });
  }
  throw err;
}

function subscriptionValidation(request: FastifyRequest, creating: boolean): void {
  const err = request.validationError;
  if (!err) return;
  const body = request.body;
  if (isObject(body)) {
    if (creating && body.acknowledge_polling_still_mandatory !== true) {
      throw invalid('acknowledge_polling_still_mandatory must be true: deliveries are best-effort and may be dropped, so the consumer keeps polling GET /provisioning/v1/state-changes', { code: 'THM-60110', type: 'subscription-polling-not-acknowledged' });
    }
    if ('target_url' in body && !(typeof body.target_url === 'string' && /^https:\/\//i.test(body.target_url))) {
      throw invalid('target_url must use https:// (deliveries are signed, and sent over TLS only)', { code: 'THM-60120', type: 'subscription-target-not-https' });
    }
    if (isObject(body.event_filter) && Object.keys(body.event_filter).some((k) => k !== 'new_states' && k !== 'thing_ids')) {
      const extra = Object.keys(body.event_filter).filter((k) => k !== 'new_states' && k !== 'thing_ids');
      throw invalid(`event_filter may contain only new_states and thing_ids; it also has ${extra.map((k) => JSON.stringify(k.slice(0, 40))).join(', ')}`, { code: 'THM-60140', type: 'subscription-filter-unknown-member' });
    }
  }
  throw err;
}

export async function feedRoutes(app: ZodApp, feed: StateChangeFeed, subscriptions: Subscriptions): Promise<void> {
  app.get('/provisioning/v1/state-changes', {
    config: auth('StateChange:List', READ),
    attachValidation: true,
    schema: {
      tags, summary: 'The state-change feed: durable, in commit order, cursor-paged; poll with since=<next_cursor>',
      querystring: feedQuery, response: { 200: feedPageSchema },
    },
  }, async (request) => {
    feedValidation(request);
    return feed.page(callerOf(request), request.query);
  });

  app.get('/provisioning/v1/things', {
    config: auth('Thing:List', READ),
    schema: {
      tags, summary: 'Full sync: the things (with their state), keyset pages; the first page gives the feed cursor to resume from',
      querystring: thingsQuery, response: { 200: thingsPageSchema },
    },
  }, async (request) => feed.things(callerOf(request), request.query));

  const PATH = '/provisioning/v1/state-change-subscriptions';
  app.post(PATH, {
    config: auth('StateChangeSubscription:Create', WRITE),
    attachValidation: true,
    schema: {
      tags, summary: 'Subscribe a webhook to state changes; the signing secret is returned once',
      body: createBody, response: { 201: createdSchema },
    },
  }, async (request, reply) => {
    subscriptionValidation(request, true);
    return reply.code(201).send(await subscriptions.create(callerOf(request), request.body));
  });

  app.get(PATH, {
    config: auth('StateChangeSubscription:List', READ),
    schema: { tags, summary: "The account's subscriptions (keyset pages)", querystring: listQuery, response: { 200: subscriptionPageSchema } },
  }, async (request) => subscriptions.list(callerOf(request), request.query));

  app.get(`${PATH}/:id`, {
    config: auth('StateChangeSubscription:Read', READ),
    schema: { tags, summary: 'Read a subscription (THM-60100 when unknown)', params: idParams, response: { 200: subscriptionSchema } },
  }, async (request) => subscriptions.get(callerOf(request), request.params.id));

  app.patch(`${PATH}/:id`, {
    config: auth('StateChangeSubscription:Update', WRITE),
    attachValidation: true,
    schema: {
      tags, summary: 'Change target_url, event_filter or status; a SUSPENDED subscription accepts only {"status":"ACTIVE"} (THM-60150)',
      params: idParams, body: patchBody, response: { 200: subscriptionSchema },
    },
  }, async (request) => {
    subscriptionValidation(request, false);
    return subscriptions.patch(callerOf(request), request.params.id, request.body);
  });

  app.delete(`${PATH}/:id`, {
    config: auth('StateChangeSubscription:Delete', WRITE),
    schema: { tags, summary: 'Delete a subscription and its pending deliveries (a SUSPENDED one: THM-60150, reactivate it first)', params: idParams, response: { 204: z.null().describe('deleted') } },
  }, async (request, reply) => {
    await subscriptions.delete(callerOf(request), request.params.id);
    return reply.code(204).send(null);
  });
}
