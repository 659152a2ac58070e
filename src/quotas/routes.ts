import { z } from 'zod';
import type { FastifyRequest } from 'fastify';
import type { ZodApp } from '../gateway.js';
import { accountOf, principalOf } from '../http/auth/plugin.js';
import { refused } from '../lib/errors.js';
import type { Quotas } from './parts.js';
import type { Caller } from './views.js';
import {
  accountQuotasSchema, addMemberBody, createOrganizationBody, defaultSchema, denyBody, leaveSchema, memberSchema, orgParams,
  organizationSchema, pageOf, pageQuery, quotaSchema, requestSchema, submitRequestBody,
} from './schemas.js';

const ACCOUNT_READ = ['admin', 'operator', 'viewer'];
const ACCOUNT_ADMIN = ['admin'];
const PLATFORM = ['platform-admin', 'platform-operator'];
const ANY = [...ACCOUNT_READ, ...PLATFORM];

function callerOf(request: FastifyRequest): Caller {
  const p = principalOf(request);
  return {
    sub: p.sub, accountId: p.accountId, roles: p.roles,
    platform: p.realmKind === 'platform' && p.roles.some((r) => PLATFORM.includes(r)),
  };
}

function platformAdmin(request: FastifyRequest): Caller {
  const c = callerOf(request);
  if (!c.platform || !c.roles.includes('platform-admin')) throw refused('only platform admins (platform realm, role platform-admin) decide quota requests');
  return c;
}

export async function quotaRoutes(app: ZodApp, { values, organizations, requests, leaves }: Quotas): Promise<void> {

  // ---- defaults and account quotas --------------------------------------------------------
  app.get('/api/v1/quotas/defaults', {
    config: { auth: { action: 'quotas:Quota:ReadDefaults', roles: ANY } },
    schema: { tags: ['quotas'], summary: 'Platform default quotas (read-only)', response: { 200: z.object({ items: z.array(defaultSchema) }) } },
  }, async () => ({ items: await values.defaults() }));

  app.get('/api/v1/accounts/me/quotas', {
    config: { auth: { action: 'quotas:Quota:Read', roles: ACCOUNT_READ } },
    schema: {
      tags: ['quotas'], summary: "List the account's quotas (its organization's when a member; standalone records seeded with the defaults on first access)",
      response: { 200: accountQuotasSchema },
    },
  }, async (request) => values.accountQuotas(accountOf(request)));

  app.post('/api/v1/accounts/me/quota-requests', {
    config: { auth: { action: 'quotas:QuotaRequest:Create', roles: ACCOUNT_ADMIN } },
    schema: { tags: ['quotas'], summary: 'Submit an increase request for a standalone account quota', body: submitRequestBody, response: { 201: requestSchema } },
  }, async (request, reply) => reply.code(201).send(await requests.submitForAccount(accountOf(request), callerOf(request), request.body)));

  app.get('/api/v1/accounts/me/quota-requests', {
    config: { auth: { action: 'quotas:QuotaRequest:List', roles: ACCOUNT_READ } },
    schema: { tags: ['quotas'], summary: "List the account's increase requests (its own and the leave-gated ones)", querystring: pageQuery, response: { 200: pageOf(requestSchema) } },
  }, async (request) => requests.listForAccount(accountOf(request), request.query.page, request.query.size));

  // ---- organization quotas ----------------------------------------------------------------
  app.get('/api/v1/organizations/:orgId/quotas', {
    config: { auth: { action: 'quotas:Quota:Read', roles: ANY } },
    schema: { tags: ['quotas'], summary: 'List organization quotas', params: orgParams, response: { 200: z.object({ items: z.array(quotaSchema) }) } },
  }, async (request) => {
    await organizations.readable(request.params.orgId, callerOf(request));
    return { items: await values.organizationQuotas(request.params.orgId) };
  });

  app.get('/api/v1/organizations/:orgId/quotas/:quotaId', {
    config: { auth: { action: 'quotas:Quota:Read', roles: ANY } },
    schema: {
      tags: ['quotas'], summary: 'Get one organization quota (by record id or by quota_code)',
      params: z.object({ orgId: z.uuid(), quotaId: z.string().min(1).max(200) }), response: { 200: quotaSchema },
    },
  }, async (request) => {
    await organizations.readable(request.params.orgId, callerOf(request));
    return values.organizationQuota(request.params.orgId, request.params.quotaId);
  });

  app.post('/api/v1/organizations/:orgId/quota-requests', {
    config: { auth: { action: 'quotas:QuotaRequest:Create', roles: ACCOUNT_ADMIN } },
    schema: { tags: ['quotas'], summary: 'Submit an increase request for an organization quota (management account admins)', params: orgParams, body: submitRequestBody, response: { 201: requestSchema } },
  }, async (request, reply) => reply.code(201).send(await requests.submitForOrganization(request.params.orgId, callerOf(request), request.body)));

  app.get('/api/v1/organizations/:orgId/quota-requests', {
    config: { auth: { action: 'quotas:QuotaRequest:List', roles: ANY } },
    schema: { tags: ['quotas'], summary: "List the organization's requests (organization-level and leave-gated)", params: orgParams, querystring: pageQuery, response: { 200: pageOf(requestSchema) } },
  }, async (request) => requests.listForOrganization(request.params.orgId, callerOf(request), request.query.page, request.query.size));

  app.delete('/api/v1/organizations/:orgId/quota-requests/:id', {
    config: { auth: { action: 'quotas:QuotaRequest:Cancel', roles: ACCOUNT_ADMIN } },
    schema: { tags: ['quotas'], summary: 'Cancel a pending organization request', params: z.object({ orgId: z.uuid(), id: z.uuid() }), response: { 200: requestSchema } },
  }, async (request) => requests.cancelForOrganization(request.params.orgId, request.params.id, callerOf(request)));

  // ---- platform admin queue ---------------------------------------------------------------
  app.get('/api/v1/quota-requests', {
    config: { auth: { action: 'quotas:QuotaRequest:ListAll', roles: PLATFORM } },
    schema: { tags: ['quotas'], summary: 'Platform admin: every pending request (standalone, organization, leave-gated), oldest first', querystring: pageQuery, response: { 200: pageOf(requestSchema) } },
  }, async (request) => {
    if (!callerOf(request).platform) throw refused('the quota request queue is for platform principals');
    return requests.queue(request.query.page, request.query.size);
  });

  app.get('/api/v1/quota-requests/:requestId', {
    config: { auth: { action: 'quotas:QuotaRequest:Read', roles: PLATFORM } },
    schema: { tags: ['quotas'], summary: 'Platform admin: read one request', params: z.object({ requestId: z.uuid() }), response: { 200: requestSchema } },
  }, async (request) => {
    if (!callerOf(request).platform) throw refused('this read is for platform principals');
    return requests.get(request.params.requestId);
  });

  app.put('/api/v1/quota-requests/:requestId/approve', {
    config: { auth: { action: 'quotas:QuotaRequest:Approve', roles: ['platform-admin'] } },
    schema: { tags: ['quotas'], summary: 'Platform admin: approve (the applied value rises to the desired value)', params: z.object({ requestId: z.uuid() }), response: { 200: requestSchema } },
  }, async (request) => requests.decide(request.params.requestId, 'approved', platformAdmin(request)));

  app.put('/api/v1/quota-requests/:requestId/deny', {
    config: { auth: { action: 'quotas:QuotaRequest:Deny', roles: ['platform-admin'] } },
    schema: { tags: ['quotas'], summary: 'Platform admin: deny; a reason is required', params: z.object({ requestId: z.uuid() }), body: denyBody, response: { 200: requestSchema } },
  }, async (request) => requests.decide(request.params.requestId, 'denied', platformAdmin(request), request.body.reason));

  // ---- organizations ----------------------------------------------------------------------
  app.post('/api/v1/organizations', {
    config: { auth: { action: 'organizations:Organization:Create', roles: ACCOUNT_ADMIN } },
    schema: { tags: ['organizations'], summary: 'A standalone account creates an organization and becomes its management account', body: createOrganizationBody, response: { 201: organizationSchema } },
  }, async (request, reply) => reply.code(201).send(await organizations.create(accountOf(request), callerOf(request), request.body.name)));

  app.get('/api/v1/accounts/me/organization', {
    config: { auth: { action: 'organizations:Organization:Read', roles: ACCOUNT_READ } },
    schema: { tags: ['organizations'], summary: "The caller's organization and its membership (404 when standalone)", response: { 200: organizationSchema.extend({ membership: memberSchema }) } },
  }, async (request) => organizations.of(accountOf(request)));

  app.get('/api/v1/organizations/:orgId', {
    config: { auth: { action: 'organizations:Organization:Read', roles: ANY } },
    schema: { tags: ['organizations'], summary: 'Read an organization (members and platform principals)', params: orgParams, response: { 200: organizationSchema } },
  }, async (request) => organizations.get(request.params.orgId, callerOf(request)));

  app.get('/api/v1/organizations/:orgId/members', {
    config: { auth: { action: 'organizations:Member:List', roles: ANY } },
    schema: { tags: ['organizations'], summary: 'List member accounts', params: orgParams, response: { 200: z.object({ items: z.array(memberSchema) }) } },
  }, async (request) => ({ items: await organizations.members(request.params.orgId, callerOf(request)) }));

  app.post('/api/v1/organizations/:orgId/members', {
    config: { auth: { action: 'organizations:Member:Add', roles: ACCOUNT_ADMIN } },
    schema: { tags: ['organizations'], summary: 'Add a standalone account (management account admins; member-accounts-per-organization enforced)', params: orgParams, body: addMemberBody, response: { 201: memberSchema } },
  }, async (request, reply) => reply.code(201).send(await organizations.addMember(request.params.orgId, request.body.account_id, callerOf(request))));

  app.delete('/api/v1/organizations/:orgId/members/:accountId', {
    config: { auth: { action: 'organizations:Member:Remove', roles: ACCOUNT_ADMIN } },
    schema: {
      tags: ['organizations'],
      summary: 'Leave (admin of that account) or remove (management account admin): 200 when departed at once, 202 when the leave is gated by quota requests',
      params: z.object({ orgId: z.uuid(), accountId: z.uuid() }), response: { 200: leaveSchema, 202: leaveSchema },
    },
  }, async (request, reply) => {
    const leave = await leaves.start(request.params.orgId, request.params.accountId, callerOf(request));
    return reply.code(leave.outcome === 'departed' ? 200 : 202).send(leave);
  });

  app.get('/api/v1/organizations/:orgId/leaves/:leaveId', {
    config: { auth: { action: 'organizations:Leave:Read', roles: ANY } },
    schema: { tags: ['organizations'], summary: 'Read a leave saga (members, the leaving account, platform principals)', params: z.object({ orgId: z.uuid(), leaveId: z.uuid() }), response: { 200: leaveSchema } },
  }, async (request) => leaves.get(request.params.orgId, request.params.leaveId, callerOf(request)));
}
