import { z } from 'zod';
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
  certificate: z.object({ serial: z.string(), notAfter: z.string(), revoked: z.boolean() }).nullable(),
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
