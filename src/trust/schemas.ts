import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';
import { LICENSE_APPROVALS, LICENSE_STATUSES, PROVISIONING_METHODS } from './repo.js';

const hex4 = z.string().regex(/^[0-9a-fA-F]{4}$/, 'four hexadecimal digits');
const text = z.string().trim().min(1).max(200).regex(/^[^\u0000-\u001f\u007f]*$/, 'no control characters');
const pem = z.string().min(1).max(16_384).regex(/^[^\u0000]*$/, 'no NUL characters');

const licenseApproval = z.enum(LICENSE_APPROVALS)
  .describe('automatic (default): license requests are granted at once; manual: they wait for a tenant with capability approve_licenses');
const modelBase = {
  vid: hex4.optional().describe("default: the account's vendor VID (POST /api/v1/vendors); another account's VID is refused (409)"),
  pid: hex4, name: text, licenseApproval: licenseApproval.optional(),
  description: z.string().max(2000).regex(/^[^\u0000]*$/, 'no NUL characters').optional(),
};
export const modelCreateSchema = z.discriminatedUnion('provisioning_method', [
  z.strictObject({ ...modelBase, provisioning_method: z.literal('none'), provisioning: z.strictObject({}).optional() }),
  z.strictObject({ ...modelBase, provisioning_method: z.literal('claim_token'), provisioning: z.strictObject({}).optional() }),
  z.strictObject({
    ...modelBase, provisioning_method: z.literal('auto'),
    provisioning: z.strictObject({
      serialPattern: z.string().min(1).max(200).optional().describe('regular expression the serial must match'),
      manufacturers: z.array(text).min(1).max(100).optional().describe('manufacturers allowed'),
    }).optional(),
  }),
  z.strictObject({
    ...modelBase, provisioning_method: z.literal('symmetric_key'),
    provisioning: z.strictObject({ groupKey: z.string().min(44).max(200).optional().describe('base64 group key (generated when absent; shown once)') }).optional(),
  }),
  z.strictObject({
    ...modelBase, provisioning_method: z.literal('certificate'),
    provisioning: z.strictObject({ manufacturerCaPem: pem.describe('PEM of the manufacturer CA that signs device birth certificates') }),
  }),
  z.strictObject({
    ...modelBase, provisioning_method: z.literal('webhook'),
    provisioning: z.strictObject({
      approvalUrl: z.url().describe('https:// approval endpoint (http:// only to loopback)'),
      timeoutMs: z.number().int().min(100).max(30_000).optional(),
    }),
  }),
]);
export type ModelCreate = z.infer<typeof modelCreateSchema>;

export const modelSchema = z.object({
  id: z.uuid(), vid: z.string(), pid: z.string(), descriptor: z.string(), name: z.string(),
  provisioning_method: z.enum(PROVISIONING_METHODS), provisioning: z.record(z.string(), z.unknown()), licenseApproval, created_at: z.string(),
  description: z.string(),
  owner_account_id: z.uuid().describe('the account that owns the model (another account for an imported model)'),
  imported: z.boolean().describe('true: imported by a share deeplink (public descriptor only: provisioning settings are not shown)'),
});
export const modelCreatedSchema = modelSchema.extend({
  secret: z.record(z.string(), z.string()).optional().describe('groupKey (symmetric_key) or webhookSecret (webhook): shown once'),
});

export const thingCreateSchema = z.strictObject({
  manufacturer: text,
  model: text.describe('vid:pid descriptor or free model name'),
  serial: text,
  metadata: z.record(z.string(), z.union([z.string().max(1000), z.number(), z.boolean()])).optional(),
});
export const thingCreatedSchema = z.object({ thingId: z.uuid(), enrollmentToken: z.string(), expiresAt: z.string() });

export const revokedSchema = z.object({
  thingId: z.uuid(), revoked: z.literal(true), revokedSerials: z.array(z.string()), crlNumber: z.number().int(), disconnected: z.boolean(),
});

export const claimGroupCreateSchema = z.strictObject({
  name: text,
  maxDevices: z.number().int().min(1).max(1_000_000),
  ttlDays: z.number().int().min(1).max(3650),
});
export const claimGroupCreatedSchema = z.object({
  id: z.uuid(), name: z.string(), sharedSecret: z.string(), maxDevices: z.number().int(), ttlDays: z.number().int(), createdAt: z.string(),
});
export const claimGroupSchema = z.object({
  id: z.uuid(), name: z.string(), maxDevices: z.number().int(), ttlDays: z.number().int(), createdAt: z.string(), expiresAt: z.string(),
  consumed: z.number().int(), status: z.enum(['active', 'capped', 'expired', 'revoked']), revoked: z.boolean(),
});

export const enrollSchema = z.strictObject({
  provisioningMethod: z.enum(PROVISIONING_METHODS).optional().describe('must match the model when sent'),
  enrollmentToken: z.string().min(1).max(200).optional().describe('token flow: the token from POST /api/v1/things'),
  claimSecret: z.string().min(1).max(200).optional(),
  manufacturer: text.optional(),
  model: text.optional().describe('vid:pid descriptor (FFF1:8001) or model id'),
  serial: text.optional(),
  csr: pem.optional().describe('PEM PKCS#10 request; then no privateKey is returned'),
  registrationId: text.optional().describe('symmetric_key: defaults to serial'),
  derivedKey: z.string().min(1).max(200).optional().describe('symmetric_key: base64 HMAC-SHA256(groupKey, registrationId)'),
  deviceCertificate: pem.optional().describe('certificate: PEM birth certificate from the manufacturer CA (with a csr of the same key)'),
});
export type EnrollBody = z.infer<typeof enrollSchema>;

export const enrollmentResponseSchema = z.strictObject({
  thingId: z.uuid().describe('the enrolled thing (its certificate CN)'),
  certificate: z.string(),
  privateKey: z.string().optional(),
  caCertificate: z.string(),
  mqttBrokerUrl: z.string(),
  mqttBrokerPort: z.number().int(),
  caBundlePem: z.string(),
  twinTopicPrefix: z.string(),
});
export type EnrollmentResponse = z.infer<typeof enrollmentResponseSchema>;

export const thingIdParams = z.object({ thingId: z.uuid() });

export const deviceStatusSchema = z.object({
  thingId: z.uuid(), state: z.string().nullable(), revoked: z.boolean(), enrolledAt: z.string().nullable(),
  certificate: named(z.object({ serial: z.string().describe('hex serial number'), notAfter: z.string(), revoked: z.boolean() }), 'Certificate', {
    description: "A device's newest certificate", example: { serial: '5A3C9E01', notAfter: '2027-11-22T10:00:00.000Z', revoked: false },
  }).nullable(),
});
export const licenseRequestSchema = z.strictObject({ features: z.array(text).max(50).optional() });
export const licenseRenewSchema = z.strictObject({ license: z.string().min(1).max(8192) });
export const licenseSchema = z.object({ licenseId: z.uuid(), license: z.string(), expiresAt: z.string() });
export const licensePendingSchema = z.object({ licenseId: z.uuid(), status: z.literal('pending') })
  .describe('the model needs tenant approval: poll GET /ddi/v1/{thingId}/license/{licenseId}');
export const licenseParams = z.object({ thingId: z.uuid(), licenseId: z.uuid() });
export const licenseStatusSchema = z.object({
  licenseId: z.uuid(),
  status: z.enum(LICENSE_STATUSES),
  license: z.string().optional().describe('granted: the RS256 JWT'),
  expiresAt: z.string().optional(),
  reason: z.string().optional().describe('denied: why'),
});
/** A license decision as the tenant sees it (no token: the device fetches that). */
export const licenseRecordSchema = z.object({
  licenseId: z.uuid(), thingId: z.uuid(), kind: z.enum(['request', 'renew']), status: z.enum(LICENSE_STATUSES),
  features: z.array(z.string()), reason: z.string().nullable(), requestedAt: z.string(),
  decidedAt: z.string().nullable(), decidedBy: z.string().nullable().describe('principal sub; null for automatic decisions'),
  expiresAt: z.string().nullable(),
});
export const licenseListQuery = z.strictObject({
  status: z.enum(LICENSE_STATUSES).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  after: z.uuid().optional(),
});
export const licenseDenySchema = z.strictObject({
  reason: z.string().trim().min(1).max(500).regex(/^[^\u0000-\u001f\u007f]*$/, 'no control characters').optional(),
});

export const emqxAuthnSchema = z.object({ clientid: z.string().max(256), username: z.string().max(256), cert_cn: z.string().max(256) });
export const emqxResultSchema = z.object({ result: z.enum(['allow', 'deny']) });

export const accessCodeSchema = z.object({ accessCode: z.string(), expiresAt: z.string() });
export const joinSchema = z.strictObject({ access_code: z.string().min(1).max(200) });
export const joinedSchema = z.object({ thingId: z.uuid(), accountId: z.uuid() });

// --- thing lifecycle
export const thingStateSchema = z.object({
  state: z.enum(['REGISTERED', 'ROLLEDOFF', 'PROVISIONED', 'IN_FACTORY', 'HANDOVER_PENDING', 'ACTIVATED', 'DEACTIVATED', 'ANNIHILATED']),
  updated_at: z.string(),
});
export const thingResolveQuery = z.strictObject({ model: text, serial: text, manufacturer: text.optional() });
export const thingResolvedSchema = thingStateSchema.extend({
  id: z.uuid(), manufacturer: z.string(), model: z.string(), serial: z.string(), revoked: z.boolean(),
});
export const factoryEligibilitySchema = z.object({
  thing_id: z.uuid(), state: thingStateSchema.shape.state, eligible: z.boolean().describe('the factory may still provision the thing and report legs'),
  reason: z.string(), model_id: z.uuid().nullable(), updated_at: z.string(),
});
export const thingAnnihilatedSchema = revokedSchema.extend(thingStateSchema.shape);

// --- enrollments (factory surface)
export const enrollmentCreateSchema = z.strictObject({
  model: text.describe("the model's vid:pid descriptor (FFF1:8001) or its id; a model of the caller's account"),
  serial: text,
  manufacturer: text.optional().describe('default: the manufacturer of the existing thing with this model and serial, else the model name'),
  csr: pem.optional().describe('PEM PKCS#10 request; then no privateKey is returned'),
});
export const enrollmentSchema = z.object({
  id: z.uuid().describe("the enrollment's id: its thing's id"),
  thing_id: z.uuid(),
  model_id: z.uuid().nullable(),
  model: z.string(),
  manufacturer: z.string(),
  serial: z.string(),
  method: z.string().describe('how the thing enrolled: factory (this route) or a device provisioning method'),
  enrolled_at: z.string(),
  state: thingStateSchema.shape.state,
  revoked: z.boolean(),
  certificate_serial: z.string().nullable().describe("the thing's newest certificate"),
  certificate_not_after: z.string().nullable(),
  certificate_revoked: z.boolean().nullable(),
});
export const enrollmentCreatedSchema = enrollmentSchema.extend(enrollmentResponseSchema.shape);
export const enrollmentListQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(200).default(50),
  after: z.uuid().optional(),
  model_id: z.uuid().optional(),
  method: z.string().max(40).optional(),
});
export const enrollmentPageSchema = z.object({ items: z.array(enrollmentSchema), next_cursor: z.uuid().nullable() });

// --- OpenAPI components (issue 39): the resources above by name, with examples
const E = EXAMPLE;
named(thingStateSchema.shape.state, 'ThingState', { description: 'A thing\'s lifecycle state (machines/thing.ts)', example: 'ACTIVATED' });
named(modelCreateSchema, 'ModelCreate', { description: 'A device model to create, by provisioning method', example: { pid: '8001', name: 'Smart plug', provisioning_method: 'claim_token' } });
named(modelSchema, 'Model', {
  description: 'A device model (vid:pid) and how its devices provision',
  example: { id: E.modelId, vid: 'FFF1', pid: '8001', descriptor: 'FFF1:8001', name: 'Smart plug', provisioning_method: 'claim_token', provisioning: {}, licenseApproval: 'automatic', created_at: E.at, description: '', owner_account_id: E.accountId, imported: false },
});
named(modelCreatedSchema, 'ModelCreated', {
  description: 'A created model; secret (groupKey or webhookSecret) is shown once',
  example: { id: E.modelId, vid: 'FFF1', pid: '8002', descriptor: 'FFF1:8002', name: 'Sensor', provisioning_method: 'symmetric_key', provisioning: {}, licenseApproval: 'automatic', created_at: E.at, description: '', owner_account_id: E.accountId, imported: false, secret: { groupKey: 'q8t1m3c2VjcmV0LWdyb3VwLWtleS1zaG93bi1vbmNlLW9ubHk=' } },
});
named(thingCreateSchema, 'ThingCreate', { description: 'A device to register', example: { manufacturer: 'Acme', model: 'FFF1:8001', serial: 'SN-000123' } });
named(thingCreatedSchema, 'ThingCreated', { description: 'A registered device and its single-use enrollment token', example: { thingId: E.thingId, enrollmentToken: 'et_4Qm9c2Vjc2V0LXRva2Vu', expiresAt: E.later } });
named(revokedSchema, 'ThingRevoked', { description: 'A revocation\'s outcome', example: { thingId: E.thingId, revoked: true, revokedSerials: ['5A3C9E01'], crlNumber: 12, disconnected: true } });
named(claimGroupCreateSchema, 'ClaimGroupCreate', { example: { name: 'Line 4 batch 2026-11', maxDevices: 500, ttlDays: 30 } });
named(claimGroupCreatedSchema, 'ClaimGroupCreated', {
  description: 'A created claim group; sharedSecret is shown once',
  example: { id: E.otherId, name: 'Line 4 batch 2026-11', sharedSecret: 'cg_3k9V1c2hhcmVkLXNlY3JldA', maxDevices: 500, ttlDays: 30, createdAt: E.at },
});
named(claimGroupSchema, 'ClaimGroup', {
  description: 'A claim group: devices enroll with its shared secret until capped, expired or revoked',
  example: { id: E.otherId, name: 'Line 4 batch 2026-11', maxDevices: 500, ttlDays: 30, createdAt: E.at, expiresAt: E.later, consumed: 42, status: 'active', revoked: false },
});
named(enrollSchema, 'DeviceEnrollment', { description: 'What a device sends to enroll (one provisioning method\'s fields)', example: { enrollmentToken: 'et_4Qm9c2Vjc2V0LXRva2Vu' } });
named(enrollmentResponseSchema, 'DeviceCredentials', {
  description: 'An enrolled device\'s certificate, key (unless it sent a CSR) and broker settings',
  example: { thingId: E.thingId, certificate: '-----BEGIN CERTIFICATE-----\nMIIB…\n-----END CERTIFICATE-----\n', caCertificate: '-----BEGIN CERTIFICATE-----\nMIID…\n-----END CERTIFICATE-----\n', mqttBrokerUrl: 'mqtts://gateway.example:8883', mqttBrokerPort: 8883, caBundlePem: '-----BEGIN CERTIFICATE-----\nMIID…\n-----END CERTIFICATE-----\n', twinTopicPrefix: `devices/${E.thingId}/twin` },
});
named(deviceStatusSchema, 'DeviceStatus', { example: { thingId: E.thingId, state: 'ACTIVATED', revoked: false, enrolledAt: E.at, certificate: { serial: '5A3C9E01', notAfter: E.later, revoked: false } } });
named(licenseSchema, 'License', { description: 'A granted device license (RS256 JWT)', example: { licenseId: E.otherId, license: 'eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIzZjFjIn0.c2ln', expiresAt: E.later } });
named(licenseStatusSchema, 'LicenseStatus', { example: { licenseId: E.otherId, status: 'granted', license: 'eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIzZjFjIn0.c2ln', expiresAt: E.later } });
named(licenseRecordSchema, 'LicenseRecord', {
  description: 'A license decision as the tenant sees it',
  example: { licenseId: E.otherId, thingId: E.thingId, kind: 'request', status: 'granted', features: ['telemetry'], reason: null, requestedAt: E.at, decidedAt: E.at, decidedBy: null, expiresAt: E.later },
});
named(accessCodeSchema, 'AccessCode', { example: { accessCode: 'ac_7Hx2bWFjY2Vzcy1jb2Rl', expiresAt: E.later } });
named(thingStateSchema, 'ThingStateView', { description: 'A thing\'s lifecycle state and when it last changed', example: { state: 'IN_FACTORY', updated_at: E.at } });
named(thingResolvedSchema, 'ResolvedThing', { example: { state: 'ACTIVATED', updated_at: E.at, id: E.thingId, manufacturer: 'Acme', model: 'FFF1:8001', serial: 'SN-000123', revoked: false } });
named(factoryEligibilitySchema, 'FactoryEligibility', { example: { thing_id: E.thingId, state: 'IN_FACTORY', eligible: true, reason: 'the thing is in the factory', model_id: E.modelId, updated_at: E.at } });
named(enrollmentCreateSchema, 'EnrollmentCreate', { example: { model: 'FFF1:8001', serial: 'SN-000123' } });
named(enrollmentSchema, 'Enrollment', {
  description: 'An enrollment: a thing as it was born (its id is the thing id)',
  example: { id: E.thingId, thing_id: E.thingId, model_id: E.modelId, model: 'FFF1:8001', manufacturer: 'Acme', serial: 'SN-000123', method: 'factory', enrolled_at: E.at, state: 'ROLLEDOFF', revoked: false, certificate_serial: '5A3C9E01', certificate_not_after: E.later, certificate_revoked: false },
});
named(enrollmentPageSchema, 'EnrollmentPage', { description: 'A keyset page of enrollments' });

/** The approval a webhook-provisioned model's approvalUrl receives (webhooks: enrollmentApproval). */
export const enrollmentApprovalRequestSchema = named(z.object({
  type: z.literal('enrollment.approval'), modelId: z.uuid(), descriptor: z.string().describe('vid:pid'), manufacturer: z.string(), serial: z.string(),
}), 'EnrollmentApprovalRequest', { example: { type: 'enrollment.approval', modelId: E.modelId, descriptor: 'FFF1:8001', manufacturer: 'Acme', serial: 'SN-000123' } });
export const enrollmentApprovalAnswerSchema = named(z.object({ approved: z.boolean().describe('true admits the device; anything else refuses it') }), 'EnrollmentApprovalAnswer', { example: { approved: true } });
named(enrollmentCreatedSchema, 'EnrollmentCreated', { description: 'A factory enrollment: the enrollment and the device\'s credentials' });
