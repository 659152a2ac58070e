import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';

export const CAPABILITIES = ['enroll_things', 'approve_licenses', 'publish_marketplace', 'manage_ota_rollouts'] as const;
export type Capability = (typeof CAPABILITIES)[number];

export const STATIC_PREFIX = 'AKSV';
export const TEMPORARY_PREFIX = 'ASIA';
export const ACCESS_KEY_ID = /^(AKSV|ASIA)[0-9A-F]{16}$/;
export const SECRET_KEY = /^[A-Za-z0-9_-]{54}$/;
export const SESSION_TOKEN = /^[A-Za-z0-9_-]{43}$/;

/** Route scheme of the STS routes: a bearer JWT of an idc-* realm (anything else authenticated is 400). */
export const STS_SCHEME = 'sts-idc-jwt';

export const SCP_DOCUMENT_SIZE_DEFAULT = 5120;
export const SCPS_PER_ENTITY_DEFAULT = 5;

// --- static credentials -------------------------------------------------------------------------

export const accountParams = z.object({ accountId: z.uuid() });
export const credentialParams = z.object({ accountId: z.uuid(), credentialId: z.uuid() });

export const createCredentialBody = z.strictObject({
  principal_id: z.string().trim().min(1).max(255).describe('identity-provider user id (sub) of a tenant IAM user of the account'),
  description: z.string().max(1000).optional(),
});

export const updateCredentialBody = z.strictObject({
  status: z.enum(['ACTIVE', 'INACTIVE']),
  description: z.string().max(1000).optional(),
});

export const credentialSchema = z.object({
  id: z.uuid(),
  access_key_id: z.string().length(20),
  status: z.enum(['ACTIVE', 'INACTIVE']),
  principal_id: z.string(),
  description: z.string(),
  created_at: z.string(),
  expires_at: z.string().nullable(),
  last_used_at: z.string().nullable(),
});
export const createdCredentialSchema = credentialSchema.extend({ secret_key: z.string().length(54).describe('shown once; store it now') });

export const listCredentialsQuery = z.strictObject({ principal_id: z.string().min(1).max(255).optional() });

// --- STS ------------------------------------------------------------------------------------------

export const getSessionTokenBody = z.strictObject({
  account_id: z.uuid(),
  duration_seconds: z.number().int().min(900).max(43200).default(3600),
});
export const sessionTokenSchema = z.object({
  access_key_id: z.string().length(20),
  secret_key: z.string().length(54),
  session_token: z.string().length(43),
  expiration: z.string(),
});
export const sessionsQuery = z.strictObject({ accountId: z.uuid() });
export const sessionItemSchema = z.object({
  id: z.uuid(),
  access_key_id: z.string(),
  status: z.literal('ACTIVE'),
  principal_id: z.string(),
  principal_type: z.literal('federated'),
  description: z.string(),
  created_at: z.string(),
  last_used_at: z.string(),
  expires_at: z.string(),
});
export const revokeSessionBody = z.strictObject({ access_key_id: z.string().regex(/^ASIA[0-9A-F]{16}$/, 'a temporary access key id: ASIA followed by 16 upper-case hex characters') });
export const revokeAllBody = z.strictObject({ account_id: z.uuid() });
export const accountIdHeader = z.object({ 'x-account-id': z.string().optional().describe('the account acted on (UUID)') });

// --- roles assigned to tenant IAM users (their static keys carry them) ---------------------------

export const userRolesParams = z.object({
  accountId: z.uuid(),
  principalId: z.string().trim().min(1).max(255).describe('identity-provider user id (sub) of a tenant IAM user of the account'),
});
export const userRolesBody = z.strictObject({
  roles: z.array(z.string().min(1).max(100)).max(20)
    .describe('account roles (admin, operator, viewer) the user\'s static keys carry; [] removes the assignment (keys fall back to the roles the identity provider last asserted)'),
});
export const userRolesSchema = z.object({
  account_id: z.uuid(),
  principal_id: z.string(),
  roles: z.array(z.string()).describe('assigned by an account admin ([] when none)'),
  idp_roles: z.array(z.string()).describe('last asserted by the identity provider ([] when the user never signed in)'),
  key_roles: z.array(z.string()).describe("what the user's static keys carry: roles when any are assigned, else idp_roles"),
  updated_at: z.string().nullable(),
  assigned_by: z.string().nullable(),
});

// --- assignments ------------------------------------------------------------------------------

export const assignmentParams = z.object({
  accountId: z.uuid(),
  realm: z.string().regex(/^idc-[A-Za-z0-9._-]{1,64}$/, 'an identity-center realm: idc-<name>'),
  principalId: z.string().min(1).max(255),
});
export const assignmentBody = z.strictObject({
  roles: z.array(z.enum(['admin', 'operator', 'viewer'])).min(1).max(3).describe('account roles the user gets in this account'),
});
export const assignmentSchema = z.object({
  account_id: z.uuid(),
  realm: z.string(),
  principal_id: z.string(),
  roles: z.array(z.string()),
  created_at: z.string(),
  updated_at: z.string(),
  assigned_by: z.string().nullable(),
});

// --- capabilities -------------------------------------------------------------------------------

export const capabilityParams = z.object({ accountId: z.uuid(), capability: z.string().min(1).max(64) });
export const capabilitiesSchema = z.object({
  account_id: z.uuid(),
  capabilities: z.array(z.enum(CAPABILITIES)),
  grants: z.array(z.object({ capability: z.enum(CAPABILITIES), granted_at: z.string(), granted_by: z.string().nullable() })),
});

// --- SCPs -------------------------------------------------------------------------------------

const actionPattern = z.string().regex(/^(\*|[A-Za-z0-9*?_-]+(:[A-Za-z0-9*?_-]+){0,2})$/, 'an action pattern <service>:<Resource>:<Verb> (wildcards * and ? allowed)');
const resourcePattern = z.string().min(1).max(512);
export const scpStatementSchema = z.strictObject({
  Sid: z.string().max(128).optional(),
  Effect: z.enum(['Allow', 'Deny']),
  Action: z.array(actionPattern).min(1),
  Resource: z.array(resourcePattern).min(1),
});
export const scpDocumentSchema = z.strictObject({
  Version: z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'a date-like version such as 2012-10-17'),
  Statement: z.array(scpStatementSchema).min(1),
});
/** Validates a document after `normalizeScpDocument` (single Statement/Action/Resource as arrays). */

export const createScpBody = z.strictObject({
  name: z.string().trim().min(1).max(128).regex(/^[A-Za-z0-9._+=,@-]+$/, 'letters, digits and ._+=,@-'),
  description: z.string().max(1000).optional(),
  document: z.union([z.string(), z.record(z.string(), z.unknown())]).describe('the policy document, as JSON text or as an object'),
});
export const scpParams = z.object({ scpId: z.uuid() });
export const accountScpParams = z.object({ accountId: z.uuid(), scpId: z.uuid() });
export const scpSchema = z.object({
  id: z.uuid(),
  name: z.string(),
  description: z.string(),
  document: z.record(z.string(), z.unknown()),
  document_size: z.number().int(),
  created_at: z.string(),
  created_by: z.string().nullable(),
});
export const attachedScpSchema = scpSchema.extend({ attached_at: z.string(), attached_by: z.string().nullable() });

export const whoamiSchema = z.object({
  sub: z.string(),
  realm: z.string(),
  via: z.enum(['jwt', 'credential', 'factory-service', 'device', 'internal']),
  account_id: z.string().nullable(),
  roles: z.array(z.string()),
  access_key_id: z.string().nullable(),
});

// --- OpenAPI components (issue 39): the resources above by name, with examples
const E = EXAMPLE;
const credential = { id: E.otherId, access_key_id: 'AKSV0123456789ABCDEF', status: 'ACTIVE', principal_id: 'ci-bot', description: 'CI pipeline', created_at: E.at, expires_at: null, last_used_at: null } as const;
named(createCredentialBody, 'CredentialCreate', { example: { principal_id: 'ci-bot', description: 'CI pipeline' } });
named(updateCredentialBody, 'CredentialUpdate', { example: { status: 'INACTIVE' } });
named(credentialSchema, 'Credential', { description: 'A static SVC access key (its secret is never shown again)', example: credential });
named(createdCredentialSchema, 'CredentialCreated', { description: 'A created access key; secret_key is shown once', example: { ...credential, secret_key: 'x'.repeat(54) } });
named(getSessionTokenBody, 'SessionTokenRequest', { example: { account_id: E.accountId, duration_seconds: 3600 } });
named(sessionTokenSchema, 'SessionToken', { description: 'Temporary STS credentials: an ASIA key, its secret and the session token', example: { access_key_id: 'ASIA0123456789ABCDEF', secret_key: 'y'.repeat(54), session_token: 'z'.repeat(43), expiration: E.later } });
named(sessionItemSchema, 'Session', { example: { id: E.otherId, access_key_id: 'ASIA0123456789ABCDEF', status: 'ACTIVE', principal_id: 'alice', principal_type: 'federated', description: '', created_at: E.at, last_used_at: E.at, expires_at: E.later } });
named(userRolesSchema, 'UserRoles', { example: { account_id: E.accountId, principal_id: 'alice', roles: ['operator'], idp_roles: ['viewer'], key_roles: ['operator'], updated_at: E.at, assigned_by: 'admin@acme' } });
named(assignmentSchema, 'AccountAssignment', { example: { account_id: E.accountId, realm: 'idc-acme', principal_id: 'alice', roles: ['operator'], created_at: E.at, updated_at: E.at, assigned_by: 'admin@acme' } });
named(capabilitiesSchema, 'AccountCapabilities', { example: { account_id: E.accountId, capabilities: ['enroll_things'], grants: [{ capability: 'enroll_things', granted_at: E.at, granted_by: 'platform-admin' }] } });
named(scpDocumentSchema, 'ScpDocument', { description: 'A service control policy document', example: { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['factory:Thing:Annihilate'], Resource: ['*'] }] } });
named(createScpBody, 'ScpCreate', { example: { name: 'no-annihilate', document: { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['factory:Thing:Annihilate'], Resource: ['*'] }] } } });
const scp = { id: E.otherId, name: 'no-annihilate', description: '', document: { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['factory:Thing:Annihilate'], Resource: ['*'] }] }, document_size: 98, created_at: E.at, created_by: 'platform-admin' };
named(scpSchema, 'Scp', { description: 'A service control policy', example: scp });
named(attachedScpSchema, 'AttachedScp', { example: { ...scp, attached_at: E.at, attached_by: 'platform-admin' } });
named(whoamiSchema, 'WhoAmI', { example: { sub: 'alice', realm: `acc-${E.accountId}`, via: 'jwt', account_id: E.accountId, roles: ['operator'], access_key_id: null } });
