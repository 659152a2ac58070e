import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';
import { REGISTRAR_STATES } from '../../machines/registrar.js';
import { ACCESS_DECISIONS, ACCESS_REQUEST_STATES } from '../../machines/accessRequest.js';
import { FACTORY_REGISTRATION_STATES } from '../../machines/factoryRegistration.js';
import { ELIGIBILITY_GRANT_STATES } from '../../machines/eligibilityGrant.js';
import { REFERENCE_REQUEST_STATES } from '../../machines/referenceRequest.js';

const text = z.string().trim().min(1).max(200).regex(/^[^\u0000-\u001f\u007f]*$/, 'no control characters');
const longText = z.string().max(2000).regex(/^[^\u0000]*$/, 'no NUL characters');
const reason = z.string().trim().min(1, 'a reason is required').max(2000).regex(/^[^\u0000]*$/, 'no NUL characters');
const limit = z.coerce.number().int().min(1).max(100).default(20);
const cursor = z.uuid().optional().describe('next_cursor of the previous page');
const ts = z.string();
const tsOrNull = z.string().nullable();
const pageOf = <T extends z.ZodTypeAny>(item: T) => z.object({ items: z.array(item), next_cursor: z.string().nullable() });
const ttl = (what: string) => z.number().int().min(60).max(90 * 24 * 3600).optional().describe(`lifetime of the ${what} in seconds (default 7 days, at most 90)`);

export const idParams = z.object({ id: z.uuid() });
export const accountParams = z.object({ account_id: z.uuid() });
export const pageQuery = z.strictObject({ limit, after: cursor });
/** decision routes take an optional JSON body */
export const optionalReasonBody = z.strictObject({ reason: reason.optional() }).nullish();
export const reasonBody = z.strictObject({ reason });
export const nothing = z.null().describe('no content');

// --- vendors
export const vendorBody = z.strictObject({}).nullish();
export const vendorSchema = z.object({ account_id: z.uuid(), vid: z.string().describe('the account\'s VID: 4 upper-case hex digits, from the platform pool 6000-9FFF'), created_at: ts });

// --- registrars
export const registrarCreateBody = z.strictObject({ name: text, description: longText.optional() });
export const registrarPatchBody = z.strictObject({ name: text.optional(), description: longText.optional() })
  .refine((b) => b.name !== undefined || b.description !== undefined, 'send name or description');
export const registrarListQuery = z.strictObject({
  state: z.enum(REGISTRAR_STATES.filter((s) => s !== 'DELETED') as ['PENDING', 'APPROVED', 'REJECTED']).optional(),
  account_id: z.uuid().optional().describe('platform staff only: one account\'s registrars'),
  limit, after: cursor,
});
export const canonicalModelBody = z.strictObject({ model_id: z.uuid().describe("a model of the registrar's account") });
export const registrarSchema = z.object({
  id: z.uuid(), account_id: z.uuid(), name: z.string(), description: z.string(),
  state: z.enum(REGISTRAR_STATES).describe('PENDING until a platform operator approves (APPROVED) or rejects (REJECTED) it'),
  canonical_model_id: z.uuid().nullable().describe('bound once (PUT canonical-model)'),
  decided_at: tsOrNull, decided_by: z.string().nullable(), reason: z.string().nullable(), created_at: ts, updated_at: ts,
});
export const registrarPage = pageOf(registrarSchema);

// --- access requests
export const accessRequestCreateBody = z.strictObject({ registrar_id: z.uuid().describe("another account's approved registrar"), note: longText.optional() });
export const accessRequestListQuery = z.strictObject({
  role: z.enum(['owner', 'requester']).optional().describe('owner: requests against your registrars; requester: yours; default both'),
  state: z.enum(ACCESS_REQUEST_STATES).optional(), limit, after: cursor,
});
export const decideBody = z.strictObject({ decision: z.enum(ACCESS_DECISIONS), reason: reason.optional() });
export const accessRequestSchema = z.object({
  id: z.uuid(), registrar_id: z.uuid(), requester_account_id: z.uuid(), owner_account_id: z.uuid(), note: z.string().nullable(),
  state: z.enum(ACCESS_REQUEST_STATES), decision: z.enum(ACCESS_DECISIONS).nullable(),
  decided_at: tsOrNull, decided_by: z.string().nullable(), reason: z.string().nullable(), created_at: ts,
});
export const accessRequestPage = pageOf(accessRequestSchema);

// --- factory registrations
export const registrationBody = z.strictObject({ note: longText.optional() }).nullish();
export const registrationSchema = z.object({
  account_id: z.uuid(), state: z.enum(FACTORY_REGISTRATION_STATES), note: z.string().nullable(), requested_at: ts, requested_by: z.string(),
  decided_at: tsOrNull, decided_by: z.string().nullable(), reason: z.string().nullable(),
});
export const registrationQueueQuery = z.strictObject({ limit, after: z.uuid().optional().describe('next_cursor (an account id) of the previous page') });
export const registrationPage = pageOf(registrationSchema);

// --- eligibility
export const artifactCreateBody = z.strictObject({ note: longText.optional(), expires_in_seconds: ttl('artifact') }).nullish();
export const redeemBody = z.strictObject({
  token: z.string().max(200).optional(),
  url: z.string().max(4096).optional().describe('the shareable URL (the token is its fragment)'),
}).refine((b) => (b.token === undefined) !== (b.url === undefined), 'send exactly one of token, url');
export const artifactSchema = z.object({
  id: z.uuid(), account_id: z.uuid(), note: z.string().nullable(), status: z.enum(['ACTIVE', 'EXPIRED', 'REVOKED']),
  expires_at: ts, revoked_at: tsOrNull, created_by: z.string(), created_at: ts,
});
export const artifactCreatedSchema = artifactSchema.extend({
  token: z.string().describe('ela_ + 43 base64url characters; shown once (stored as SHA-256)'),
  url: z.string().describe('shareable URL: <PUBLIC_BASE_URL>/links/eligibility#<token>'),
});
export const artifactPage = pageOf(artifactSchema);
export const grantListQuery = z.strictObject({
  state: z.enum(ELIGIBILITY_GRANT_STATES).optional(),
  role: z.enum(['owner', 'requester']).optional().describe('owner (default): your inbox; requester: grants you asked for'),
  limit, after: cursor,
});
export const grantSchema = z.object({
  id: z.uuid(), artifact_id: z.uuid(), owner_account_id: z.uuid(), requester_account_id: z.uuid(), state: z.enum(ELIGIBILITY_GRANT_STATES),
  decided_at: tsOrNull, decided_by: z.string().nullable(), reason: z.string().nullable(), created_at: ts,
});
export const grantPage = pageOf(grantSchema);

// --- reference requests and thing references
export const referenceFilter = z.strictObject({
  serial_prefix: text.optional().describe('things whose serial starts with this'),
  manufacturer: text.optional().describe('things of this manufacturer'),
}).describe("over the things of the registrar's canonical model (owned by the registrar's account)");
export const referenceRequestCreateBody = z.strictObject({ registrar_id: z.uuid(), filter: referenceFilter.optional(), note: longText.optional() });
export const referenceRequestListQuery = z.strictObject({ state: z.enum(REFERENCE_REQUEST_STATES).optional(), limit, after: cursor });
export const referenceRequestSchema = z.object({
  id: z.uuid(), registrar_id: z.uuid(), requester_account_id: z.uuid(), owner_account_id: z.uuid(),
  filter: z.object({ serial_prefix: z.string().optional(), manufacturer: z.string().optional() }), note: z.string().nullable(),
  state: z.enum(REFERENCE_REQUEST_STATES), decided_at: tsOrNull, decided_by: z.string().nullable(), reason: z.string().nullable(),
  revoked_at: tsOrNull, created_at: ts,
});
export const referenceRequestDecidedSchema = referenceRequestSchema.extend({
  references_added: z.number().int().optional().describe('approval: references the initial reconcile made'),
});
export const referenceRequestPage = pageOf(referenceRequestSchema);
export const thingReferenceSchema = z.object({
  id: z.uuid(), thing_id: z.uuid(), owner_account_id: z.uuid(), source: z.enum(['reference_request', 'device_deeplink']),
  reference_request_id: z.uuid().nullable(), device_deeplink_id: z.uuid().nullable(),
  model_id: z.uuid().nullable(), descriptor: z.string().nullable(), manufacturer: z.string(), model: z.string(), serial: z.string(),
  state: z.string().describe("the thing's lifecycle state now"), created_at: ts,
});
export const thingReferenceQuery = z.strictObject({ reference_request_id: z.uuid().optional(), limit, after: cursor });
export const thingReferencePage = pageOf(thingReferenceSchema);

// --- device deeplinks
export const deeplinkCreateBody = z.strictObject({ thing_id: z.uuid().describe('a thing of your account'), expires_in_seconds: ttl('deeplink') });
export const deeplinkSchema = z.object({ id: z.uuid(), thing_id: z.uuid(), expires_at: ts, redemptions: z.number().int(), created_by: z.string(), created_at: ts });
export const deeplinkCreatedSchema = deeplinkSchema.extend({
  token: z.string().describe('dlk_ + 43 base64url characters; shown once (stored as SHA-256)'),
  url: z.string().describe('encodable URL (e.g. in a QR code): <PUBLIC_BASE_URL>/links/device#<token>'),
});
export const deeplinkPage = pageOf(deeplinkSchema);

// --- OpenAPI components (issue 39): the resources above by name, with examples
const E = EXAMPLE;
named(vendorSchema, 'Vendor', { description: 'An account\'s vendor ID namespace', example: { account_id: E.accountId, vid: '6A01', created_at: E.at } });
named(registrarCreateBody, 'RegistrarCreate', { example: { name: 'Acme factory line 4' } });
named(registrarSchema, 'Registrar', { example: { id: E.otherId, account_id: E.accountId, name: 'Acme factory line 4', description: '', state: 'APPROVED', canonical_model_id: E.modelId, decided_at: E.at, decided_by: 'platform-admin', reason: null, created_at: E.at, updated_at: E.at } });
named(registrarPage, 'RegistrarPage');
named(accessRequestCreateBody, 'AccessRequestCreate', { example: { registrar_id: E.otherId, note: 'we assemble line 4' } });
named(decideBody, 'AccessRequestDecision', { example: { decision: 'APPROVED' } });
named(accessRequestSchema, 'AccessRequest', { example: { id: E.otherId, registrar_id: E.otherId, requester_account_id: E.accountId, owner_account_id: E.accountId, note: null, state: 'PENDING', decision: null, decided_at: null, decided_by: null, reason: null, created_at: E.at } });
named(accessRequestPage, 'AccessRequestPage');
named(registrationSchema, 'FactoryRegistration', { example: { account_id: E.accountId, state: 'REQUESTED', note: null, requested_at: E.at, requested_by: 'admin@acme', decided_at: null, decided_by: null, reason: null } });
named(registrationPage, 'FactoryRegistrationPage');
named(redeemBody, 'Redemption', { description: 'A token or its shareable URL', example: { token: 'ela_' + 'A'.repeat(43) } });
const artifact = { id: E.otherId, account_id: E.accountId, note: null, status: 'ACTIVE', expires_at: E.later, revoked_at: null, created_by: 'admin@acme', created_at: E.at } as const;
named(artifactSchema, 'EligibilityArtifact', { example: artifact });
named(artifactCreatedSchema, 'EligibilityArtifactCreated', { example: { ...artifact, token: 'ela_' + 'A'.repeat(43), url: `https://gateway.example.net/links/eligibility#ela_${'A'.repeat(43)}` } });
named(artifactPage, 'EligibilityArtifactPage');
named(grantSchema, 'EligibilityGrant', { example: { id: E.otherId, artifact_id: E.otherId, owner_account_id: E.accountId, requester_account_id: E.accountId, state: 'PENDING', decided_at: null, decided_by: null, reason: null, created_at: E.at } });
named(grantPage, 'EligibilityGrantPage');
named(referenceRequestCreateBody, 'ReferenceRequestCreate', { example: { registrar_id: E.otherId, filter: { serial_prefix: 'SN-0001' } } });
const referenceRequest = { id: E.otherId, registrar_id: E.otherId, requester_account_id: E.accountId, owner_account_id: E.accountId, filter: { serial_prefix: 'SN-0001' }, note: null, state: 'PENDING', decided_at: null, decided_by: null, reason: null, revoked_at: null, created_at: E.at } as const;
named(referenceRequestSchema, 'ReferenceRequest', { example: referenceRequest });
named(referenceRequestPage, 'ReferenceRequestPage');
named(thingReferenceSchema, 'ThingReference', { example: { id: E.otherId, thing_id: E.thingId, owner_account_id: E.accountId, source: 'device_deeplink', reference_request_id: null, device_deeplink_id: E.otherId, model_id: E.modelId, descriptor: 'FFF1:8001', manufacturer: 'Acme', model: 'FFF1:8001', serial: 'SN-000123', state: 'ACTIVATED', created_at: E.at } });
named(thingReferencePage, 'ThingReferencePage');
named(deeplinkCreateBody, 'DeviceDeeplinkCreate', { example: { thing_id: E.thingId, expires_in_seconds: 86400 } });
const deeplink = { id: E.otherId, thing_id: E.thingId, expires_at: E.later, redemptions: 0, created_by: 'admin@acme', created_at: E.at };
named(deeplinkSchema, 'DeviceDeeplink', { example: deeplink });
named(deeplinkCreatedSchema, 'DeviceDeeplinkCreated', { example: { ...deeplink, token: 'dlk_' + 'A'.repeat(43), url: `https://gateway.example.net/links/device#dlk_${'A'.repeat(43)}` } });
named(deeplinkPage, 'DeviceDeeplinkPage');
