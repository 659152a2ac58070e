import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Gateway, ZodApp } from '../gateway.js';
import { notFound } from '../lib/errors.js';
import { parseAccountIdHeader } from '../http/auth/accountHeader.js';
import { principalOf } from '../http/auth/plugin.js';
import { ACCOUNT_ROLES, PLATFORM_ROLES, type Principal } from '../http/auth/principal.js';
import type { IamServices } from './index.js';
import * as s from './schemas.js';

const ADMIN = ['admin'];
const PLATFORM_ADMIN = ['platform-admin'];
const PLATFORM_READ = [...PLATFORM_ROLES];
const problem = z.object({ type: z.string(), title: z.string(), status: z.number(), detail: z.string() }).passthrough();

/** Tenant routes act on the caller's own account; any other account is 404 (never 403). */
function ownAccount(request: FastifyRequest, accountId: string): Principal {
  const p = principalOf(request);
  if (!p.accountId || p.accountId.toLowerCase() !== accountId.toLowerCase()) throw notFound(`account ${accountId} not found`);
  return p;
}

export async function iamRoutes(app: ZodApp, gw: Gateway, iam: IamServices): Promise<void> {
  // --- static credentials (account admins) ------------------------------------------------------
  app.post('/iam/v1/accounts/:accountId/credentials', {
    config: { auth: { action: 'iam:Credential:Create', roles: ADMIN } },
    schema: {
      tags: ['iam'], summary: 'Create a static credential (AKSV access key; the secret is shown once)',
      params: s.accountParams, body: s.createCredentialBody,
      response: { 201: s.createdCredentialSchema, 409: problem },
    },
  }, async (request, reply) => {
    const p = ownAccount(request, request.params.accountId);
    return reply.code(201).send(await iam.credentials.create(request.params.accountId, request.body, p.sub));
  });

  app.get('/iam/v1/accounts/:accountId/credentials', {
    config: { auth: { action: 'iam:Credential:List', roles: ADMIN } },
    schema: { tags: ['iam'], summary: 'List the static credentials of the account', params: s.accountParams, querystring: s.listCredentialsQuery, response: { 200: z.array(s.credentialSchema) } },
  }, async (request) => {
    ownAccount(request, request.params.accountId);
    return iam.credentials.list(request.params.accountId, request.query.principal_id);
  });

  app.get('/iam/v1/accounts/:accountId/credentials/:credentialId', {
    config: { auth: { action: 'iam:Credential:Read', roles: ADMIN } },
    schema: { tags: ['iam'], summary: 'Read a static credential (never its secret)', params: s.credentialParams, response: { 200: s.credentialSchema } },
  }, async (request) => {
    ownAccount(request, request.params.accountId);
    return iam.credentials.get(request.params.accountId, request.params.credentialId);
  });

  app.put('/iam/v1/accounts/:accountId/credentials/:credentialId', {
    config: { auth: { action: 'iam:Credential:Update', roles: ADMIN } },
    schema: { tags: ['iam'], summary: 'Activate or deactivate a static credential, change its description', params: s.credentialParams, body: s.updateCredentialBody, response: { 200: s.credentialSchema } },
  }, async (request) => {
    const p = ownAccount(request, request.params.accountId);
    return iam.credentials.update(request.params.accountId, request.params.credentialId, request.body, p.sub);
  });

  app.delete('/iam/v1/accounts/:accountId/credentials/:credentialId', {
    config: { auth: { action: 'iam:Credential:Delete', roles: ADMIN } },
    schema: { tags: ['iam'], summary: 'Delete a static credential (its secret cannot be recovered)', params: s.credentialParams, response: { 204: z.null().describe('deleted') } },
  }, async (request, reply) => {
    const p = ownAccount(request, request.params.accountId);
    await iam.credentials.delete(request.params.accountId, request.params.credentialId, p.sub);
    return reply.code(204).send(null);
  });

  // --- roles of tenant IAM users' static keys (account admins; issue 32) -------------------------
  app.get('/iam/v1/accounts/:accountId/users/:principalId/roles', {
    config: { auth: { action: 'iam:UserRoles:Read', roles: ADMIN } },
    schema: {
      tags: ['iam'], summary: "Roles assigned to an IAM user, the identity provider's last asserted ones, and what the user's static keys carry",
      params: s.userRolesParams, response: { 200: s.userRolesSchema },
    },
  }, async (request) => {
    ownAccount(request, request.params.accountId);
    return iam.roles.describe(request.params.accountId, request.params.principalId);
  });

  app.put('/iam/v1/accounts/:accountId/users/:principalId/roles', {
    config: { auth: { action: 'iam:UserRoles:Assign', roles: ADMIN } },
    schema: {
      tags: ['iam'], summary: "Assign the roles an IAM user's static keys carry (replaces; [] removes; only account roles the caller holds)",
      params: s.userRolesParams, body: s.userRolesBody, response: { 200: s.userRolesSchema, 400: problem, 403: problem },
    },
  }, async (request) => {
    const p = ownAccount(request, request.params.accountId);
    return iam.roles.assign(request.params.accountId, request.params.principalId, request.body.roles, p);
  });

  // --- STS: the route scheme admits idc-* bearer JWTs only (others 400) before the body is parsed;
  // the handlers authorize against the account named in the call (roles of its assignment).
  const sts = { auth: { schemes: [s.STS_SCHEME] } };
  const stsSecurity = [{ bearer: [] }];
  const authorize = (request: FastifyRequest, p: Principal, action: string) => gw.auth.authorize(p, { action, roles: ACCOUNT_ROLES }, request);
  /** The STS caller, checked against `X-Account-Id` and the account the call names (by default the header itself). */
  const accountCaller = (request: FastifyRequest, named?: string) => {
    const p = principalOf(request);
    const header = parseAccountIdHeader(request.headers['x-account-id']);
    iam.sessions.requireAccountHeader(p, header, named ?? header);
    return p;
  };

  app.post('/iam/v1/sts/get-session-token', {
    config: sts,
    schema: {
      tags: ['iam', 'sts'], summary: 'Exchange an identity-center JWT for temporary credentials (ASIA key, secret, session token)', security: stsSecurity,
      body: s.getSessionTokenBody, response: { 200: s.sessionTokenSchema },
    },
  }, async (request) => {
    const p = principalOf(request);
    const { account_id: accountId, duration_seconds: duration } = request.body;
    const roles = await iam.assignments.roles(p.realm, p.sub, accountId);
    if (roles) await authorize(request, { ...p, accountId, roles }, 'sts:SessionToken:Create');
    return iam.sessions.issue(p, accountId, duration);
  });

  app.get('/iam/v1/sts/sessions', {
    config: sts,
    schema: {
      tags: ['iam', 'sts'], summary: "List the caller's active temporary credentials in an account", security: stsSecurity,
      querystring: s.sessionsQuery, headers: s.accountIdHeader, response: { 200: z.array(s.sessionItemSchema) },
    },
  }, async (request) => {
    const p = accountCaller(request, request.query.accountId);
    await authorize(request, p, 'sts:Session:List');
    return iam.sessions.list(p, request.query.accountId);
  });

  app.post('/iam/v1/sts/revoke-session', {
    config: sts,
    schema: {
      tags: ['iam', 'sts'], summary: 'Revoke one of the caller\'s temporary credentials', security: stsSecurity,
      headers: s.accountIdHeader, body: s.revokeSessionBody,
      response: { 200: z.object({ message: z.string(), access_key_id: z.string() }) },
    },
  }, async (request) => {
    const p = accountCaller(request);
    await authorize(request, p, 'sts:Session:Revoke');
    return iam.sessions.revoke(p, p.accountId!, request.body.access_key_id);
  });

  app.post('/iam/v1/sts/revoke-all-sessions', {
    config: sts,
    schema: {
      tags: ['iam', 'sts'], summary: "Revoke all of the caller's temporary credentials in an account", security: stsSecurity,
      headers: s.accountIdHeader, body: s.revokeAllBody,
      response: { 200: z.object({ message: z.string(), revoked_count: z.number().int() }) },
    },
  }, async (request) => {
    const p = accountCaller(request, request.body.account_id);
    await authorize(request, p, 'sts:Session:Revoke');
    return iam.sessions.revokeAll(p, request.body.account_id);
  });

  // --- who am I (any authenticated tenant or platform caller; bearer or SVC) --------------------
  app.get('/iam/v1/whoami', {
    config: { auth: { action: 'iam:Identity:Read', roles: [...ACCOUNT_ROLES, ...PLATFORM_ROLES] } },
    schema: { tags: ['iam'], summary: 'The authenticated caller: subject, realm, account, roles, access key', response: { 200: s.whoamiSchema } },
  }, async (request) => {
    const p = principalOf(request);
    return { sub: p.sub, realm: p.realm, via: p.via, account_id: p.accountId ?? null, roles: p.roles, access_key_id: p.credential?.accessKeyId ?? null };
  });

  // --- account admins read their SCPs and capabilities ------------------------------------------
  app.get('/iam/v1/accounts/:accountId/capabilities', {
    config: { auth: { action: 'iam:Capability:Read', roles: ADMIN } },
    schema: { tags: ['iam'], summary: "The account's capabilities (read-only for account admins)", params: s.accountParams, response: { 200: s.capabilitiesSchema } },
  }, async (request) => {
    ownAccount(request, request.params.accountId);
    return iam.capabilities.list(request.params.accountId);
  });

  app.get('/iam/v1/accounts/:accountId/scps', {
    config: { auth: { action: 'iam:Scp:Read', roles: ADMIN } },
    schema: { tags: ['iam'], summary: 'SCPs attached to the account (read-only for account admins)', params: s.accountParams, response: { 200: z.array(s.attachedScpSchema) } },
  }, async (request) => {
    ownAccount(request, request.params.accountId);
    return iam.scps.attached(request.params.accountId);
  });

  // --- platform admins: capabilities ------------------------------------------------------------
  app.get('/platform/v1/accounts/:accountId/capabilities', {
    config: { auth: { action: 'platform:Capability:Read', roles: PLATFORM_READ } },
    schema: { tags: ['platform'], summary: "An account's capabilities", params: s.accountParams, response: { 200: s.capabilitiesSchema } },
  }, async (request) => iam.capabilities.list(request.params.accountId));

  app.put('/platform/v1/accounts/:accountId/capabilities/:capability', {
    config: { auth: { action: 'platform:Capability:Grant', roles: PLATFORM_ADMIN } },
    schema: { tags: ['platform'], summary: 'Grant a capability to an account (idempotent)', params: s.capabilityParams, response: { 200: s.capabilitiesSchema } },
  }, async (request) => {
    await iam.capabilities.grant(request.params.accountId, request.params.capability, principalOf(request).sub);
    return iam.capabilities.list(request.params.accountId);
  });

  app.delete('/platform/v1/accounts/:accountId/capabilities/:capability', {
    config: { auth: { action: 'platform:Capability:Revoke', roles: PLATFORM_ADMIN } },
    schema: { tags: ['platform'], summary: 'Revoke a capability from an account', params: s.capabilityParams, response: { 204: z.null().describe('revoked') } },
  }, async (request, reply) => {
    if (!(await iam.capabilities.revoke(request.params.accountId, request.params.capability))) {
      throw notFound(`account ${request.params.accountId} does not hold capability ${request.params.capability}`);
    }
    return reply.code(204).send(null);
  });

  // --- platform admins: SCPs ----------------------------------------------------------------------
  app.post('/platform/v1/scps', {
    config: { auth: { action: 'platform:Scp:Create', roles: PLATFORM_ADMIN } },
    schema: { tags: ['platform'], summary: 'Create a service control policy (deny-based)', body: s.createScpBody, response: { 201: s.scpSchema } },
  }, async (request, reply) => reply.code(201).send(await iam.scps.create(request.body, principalOf(request).sub)));

  app.get('/platform/v1/scps', {
    config: { auth: { action: 'platform:Scp:List', roles: PLATFORM_READ } },
    schema: { tags: ['platform'], summary: 'List service control policies', response: { 200: z.array(s.scpSchema) } },
  }, async () => iam.scps.list());

  app.get('/platform/v1/scps/:scpId', {
    config: { auth: { action: 'platform:Scp:Read', roles: PLATFORM_READ } },
    schema: { tags: ['platform'], summary: 'Read a service control policy', params: s.scpParams, response: { 200: s.scpSchema } },
  }, async (request) => iam.scps.get(request.params.scpId));

  app.delete('/platform/v1/scps/:scpId', {
    config: { auth: { action: 'platform:Scp:Delete', roles: PLATFORM_ADMIN } },
    schema: { tags: ['platform'], summary: 'Delete a service control policy (409 while attached)', params: s.scpParams, response: { 204: z.null().describe('deleted') } },
  }, async (request, reply) => {
    await iam.scps.delete(request.params.scpId);
    return reply.code(204).send(null);
  });

  app.get('/platform/v1/accounts/:accountId/scps', {
    config: { auth: { action: 'platform:Scp:Read', roles: PLATFORM_READ } },
    schema: { tags: ['platform'], summary: 'SCPs attached to an account', params: s.accountParams, response: { 200: z.array(s.attachedScpSchema) } },
  }, async (request) => iam.scps.attached(request.params.accountId));

  app.put('/platform/v1/accounts/:accountId/scps/:scpId', {
    config: { auth: { action: 'platform:Scp:Attach', roles: PLATFORM_ADMIN } },
    schema: { tags: ['platform'], summary: 'Attach an SCP to an account (idempotent; at most 5 per account)', params: s.accountScpParams, response: { 200: z.array(s.attachedScpSchema), 201: z.array(s.attachedScpSchema) } },
  }, async (request, reply) => {
    const { created } = await iam.scps.attach(request.params.accountId, request.params.scpId, principalOf(request).sub);
    return reply.code(created ? 201 : 200).send(await iam.scps.attached(request.params.accountId));
  });

  app.delete('/platform/v1/accounts/:accountId/scps/:scpId', {
    config: { auth: { action: 'platform:Scp:Detach', roles: PLATFORM_ADMIN } },
    schema: { tags: ['platform'], summary: 'Detach an SCP from an account', params: s.accountScpParams, response: { 204: z.null().describe('detached') } },
  }, async (request, reply) => {
    await iam.scps.detach(request.params.accountId, request.params.scpId);
    return reply.code(204).send(null);
  });

  // --- platform admins: identity-center account assignments --------------------------------------
  app.get('/platform/v1/accounts/:accountId/assignments', {
    config: { auth: { action: 'platform:Assignment:List', roles: PLATFORM_READ } },
    schema: { tags: ['platform'], summary: 'Identity-center users assigned to an account', params: s.accountParams, response: { 200: z.array(s.assignmentSchema) } },
  }, async (request) => iam.assignments.list(request.params.accountId));

  app.put('/platform/v1/accounts/:accountId/assignments/:realm/:principalId', {
    config: { auth: { action: 'platform:Assignment:Put', roles: PLATFORM_ADMIN } },
    schema: { tags: ['platform'], summary: 'Assign an identity-center user to an account with roles (create or replace)', params: s.assignmentParams, body: s.assignmentBody, response: { 200: s.assignmentSchema, 201: s.assignmentSchema } },
  }, async (request, reply) => {
    const { assignment, created } = await iam.assignments.put({ ...request.params, roles: request.body.roles }, principalOf(request).sub);
    return reply.code(created ? 201 : 200).send(assignment);
  });

  app.delete('/platform/v1/accounts/:accountId/assignments/:realm/:principalId', {
    config: { auth: { action: 'platform:Assignment:Delete', roles: PLATFORM_ADMIN } },
    schema: { tags: ['platform'], summary: 'Remove an assignment (its temporary credentials stop working at once)', params: s.assignmentParams, response: { 204: z.null().describe('removed') } },
  }, async (request, reply) => {
    await iam.assignments.delete(request.params.accountId, request.params.realm, request.params.principalId);
    return reply.code(204).send(null);
  });
}
