import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { ZodApp } from '../gateway.js';
import { accountOf, principalOf } from '../http/auth/plugin.js';
import type { BridgesService, Caller } from './service.js';
import { bridgeCreate, bridgeListSchema, bridgePatch, bridgeSchema, idParams, ruleCreate, ruleListSchema, rulePatch, ruleSchema } from './schemas.js';

const READ = ['admin', 'operator', 'viewer'];
const WRITE = ['admin', 'operator'];
const tags = ['bridges'];
const auth = (action: string, roles: string[]) => ({ auth: { action: `bridges:${action}`, roles } });
const callerOf = (request: FastifyRequest): Caller => ({ sub: principalOf(request).sub, accountId: accountOf(request) });

/** Data bridges (sinks) and the rules that route device data and events to them (issue 34). */
export async function bridgeRoutes(app: ZodApp, service: BridgesService): Promise<void> {
  app.post('/api/v1/bridges', {
    config: auth('Bridge:Create', WRITE),
    schema: { tags, summary: 'Registers a sink: NATS JetStream or RabbitMQ (credentials are sealed and never returned)', body: bridgeCreate, response: { 201: bridgeSchema } },
  }, async (request, reply) => reply.code(201).send(await service.createBridge(callerOf(request), request.body)));

  app.get('/api/v1/bridges', {
    config: auth('Bridge:List', READ),
    schema: { tags, summary: "The account's bridges", response: { 200: bridgeListSchema } },
  }, async (request) => ({ items: await service.listBridges(callerOf(request)) }));

  app.get('/api/v1/bridges/:id', {
    config: auth('Bridge:Read', READ),
    schema: { tags, summary: 'A bridge', params: idParams, response: { 200: bridgeSchema } },
  }, async (request) => service.getBridge(callerOf(request), request.params.id));

  app.patch('/api/v1/bridges/:id', {
    config: auth('Bridge:Update', WRITE),
    schema: { tags, summary: 'Changes a bridge (its rules reconnect with the new settings)', params: idParams, body: bridgePatch, response: { 200: bridgeSchema } },
  }, async (request) => service.patchBridge(callerOf(request), request.params.id, request.body));

  app.delete('/api/v1/bridges/:id', {
    config: auth('Bridge:Delete', WRITE),
    schema: { tags, summary: 'Deletes a bridge no rule uses (409 otherwise)', params: idParams, response: { 204: z.null().describe('deleted') } },
  }, async (request, reply) => {
    await service.deleteBridge(callerOf(request), request.params.id);
    return reply.code(204).send(null);
  });

  app.post('/api/v1/rules', {
    config: auth('Rule:Create', WRITE),
    schema: { tags, summary: 'Routes device telemetry or events of the account to a bridge, at least once, from now on', body: ruleCreate, response: { 201: ruleSchema } },
  }, async (request, reply) => reply.code(201).send(await service.createRule(callerOf(request), request.body)));

  app.get('/api/v1/rules', {
    config: auth('Rule:List', READ),
    schema: { tags, summary: "The account's rules with their delivery counts and lag", response: { 200: ruleListSchema } },
  }, async (request) => ({ items: await service.listRules(callerOf(request)) }));

  app.get('/api/v1/rules/:id', {
    config: auth('Rule:Read', READ),
    schema: { tags, summary: 'A rule with its delivery counts, lag and last error', params: idParams, response: { 200: ruleSchema } },
  }, async (request) => service.getRule(callerOf(request), request.params.id));

  app.patch('/api/v1/rules/:id', {
    config: auth('Rule:Update', WRITE),
    schema: { tags, summary: 'Changes a rule, or enables/disables it (`enabled`); a re-enabled rule resumes from its position', params: idParams, body: rulePatch, response: { 200: ruleSchema } },
  }, async (request) => service.patchRule(callerOf(request), request.params.id, request.body));

  app.delete('/api/v1/rules/:id', {
    config: auth('Rule:Delete', WRITE),
    schema: { tags, summary: 'Deletes a rule', params: idParams, response: { 204: z.null().describe('deleted') } },
  }, async (request, reply) => {
    await service.deleteRule(callerOf(request), request.params.id);
    return reply.code(204).send(null);
  });
}
