/**
 * The parts of the OpenAPI document that no route schema says (issue 39): the security schemes
 * the gateway accepts, the outbound calls a user implements (`webhooks`), and the statuses a
 * route answers beyond the ones every route of its kind can give (src/http/openapi.ts,
 * errorStatusesOf). test/http/contract.test.ts compares these with what the suite observes.
 */
import { HEADER_KEY_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP } from '../clients/svcSigner.js';

/** Route-specific statuses: `METHOD path` (OpenAPI form; the /provisioning/v1 edge aliases included) -> status -> why. */
export const ROUTE_STATUSES: ReadonlyArray<{ route: RegExp; statuses: Readonly<Record<number, string>> }> = [
  // cursors older than 72 hours
  { route: /^GET \/provisioning\/v1\/state-changes$/, statuses: { 410: 'THM-50120: the cursor is older than 72 hours; full sync with GET /provisioning/v1/things and resume from its feed_cursor' } },
  { route: /^GET \/api\/v1\/identity-blacklist\/deltas$/, statuses: { 410: 'the cursor is older than 72 hours: fetch snapshot.signed and resume from its cursor' } },
  // lookups by a body or query value (no path parameter): absent is a 404
  { route: /^GET \/api\/v1\/identity-blacklist\/check$/, statuses: { 404: 'the model is not known to the caller' } },
  { route: /^POST \/api\/v1\/(eligibility-artifacts|device-deeplinks)\/redeem$/, statuses: { 404: 'no such artifact or deeplink (or not redeemable by the caller)', 410: 'the artifact or deeplink has expired or was revoked' } },
  { route: /^(GET|POST) \/api\/v1\/vendors$/, statuses: { 404: 'the account has no vendor namespace (GET) or the account is not known (POST)' } },
  { route: /^GET \/(api|provisioning)\/v1\/things\/resolve$/, statuses: { 404: 'no thing of the caller matches the model and serial' } },
  { route: /^GET \/api\/v1\/certificates\/root-crl$/, statuses: { 404: 'the root CA key is kept offline: this gateway publishes no root CRL' } },
  { route: /^GET \/api\/v1\/factory-registrations\/me$/, statuses: { 404: 'the account has no factory registration' } },
  { route: /^POST \/api\/v1\/models(\/import)?$/, statuses: { 404: 'the vendor namespace or the shared model is not known' } },
  // content the schema admits that the service refuses
  { route: /^POST \/wms-ingest\/v1\/(products|stock)\/batch$/, statuses: { 404: 'the warehouse is not registered for the partner', 422: 'the envelope names another partner, a bad correlation_id or warehouse_id, too many items, or a FULL_REFRESH' } },
  { route: /^POST \/wms-ingest\/v1\/jobs$/, statuses: { 404: 'the warehouse is not registered for the partner', 422: 'the job holds no item or breaks an envelope rule', 503: 'the node has no room for another upload now (Retry-After)' } },
  { route: /^PUT \/wms-ingest\/v1\/warehouses\/\{warehouse_id\}$/, statuses: { 422: 'warehouse_id must be 1-64 characters of A-Z a-z 0-9 . _ -' } },
  { route: /^GET \/api\/v1\/accounts\/me\/organization$/, statuses: { 404: 'the account is in no organization' } },
  { route: /^POST \/iam\/v1\/sts\/revoke-session$/, statuses: { 404: 'no active session with this access key id' } },
  { route: /^POST \/api\/v1\/ota\/rollouts$/, statuses: { 404: 'no target filter with this filter_id', 422: 'the target filter matches no thing or too many, or the groups do not add up' } },
  { route: /^POST \/api\/v1\/(accounts\/me|organizations\/\{orgId\})\/quota-requests$/, statuses: { 404: 'no quota with this service_code and quota_code', 422: 'the quota is not adjustable, or the value is above its maximum or not an increase' } },
  { route: /^(POST \/platform\/v1\/scps|PUT \/platform\/v1\/accounts\/\{accountId\}\/scps\/\{scpId\})$/, statuses: { 422: 'the SCP document is larger than the scp-document-size quota' } },
  { route: /^POST \/api\/notifications\/publish$/, statuses: { 502: 'the authorization service could not be reached or gave no decision (fail closed)' } },
  { route: /^POST \/ddi\/v1\/enroll$/, statuses: { 401: 'a wrong enrollment token, claim secret or derived key', 403: 'refused: revoked, blacklisted, a claim group capped or expired, an approval webhook that did not approve', 422: 'the claim breaks a rule the database keeps (a check constraint)', 429: 'too many failed attempts for this identifier or source (Retry-After)' } },
  { route: /^POST \/dev\/token$/, statuses: { 403: 'development tokens are minted for loopback callers only (unless DEV_TOKEN_REMOTE=true)' } },
  { route: /^GET \/(api|provisioning)\/v1\/things\/resolve$/, statuses: { 409: 'several things match the model and serial: send manufacturer' } },
  { route: /^GET \/wms-ingest\/v1\/quarantine$/, statuses: { 404: 'the warehouse is not registered for the partner' } },
  { route: /^POST \/api\/v1\/internal\/models$/, statuses: { 404: 'the account is not known' } },
  { route: /^POST \/api\/v1\/things\/\{thingId\}\/commands$/, statuses: { 504: 'the device did not answer within timeoutMs' } },
  { route: /^POST \/ddi\/v1\/\{thingId\}\/certificate\/renew$/, statuses: { 429: 'too many renewed certificates not yet used in 24 h' } },
];

/** The route-specific statuses of one operation, with why. */
export function routeStatusesOf(method: string, path: string): Map<number, string> {
  const key = `${method.toUpperCase()} ${path}`;
  const out = new Map<number, string>();
  for (const r of ROUTE_STATUSES) if (r.route.test(key)) for (const [s, why] of Object.entries(r.statuses)) out.set(Number(s), why);
  return out;
}

const SIGNING = [
  'SVC-HMAC-SHA256 (modelled on SigV4): a factory service signs each request with its access key\'s secret.',
  'kDate = HMAC("SVC4" + secret, YYYYMMDD); kService = HMAC(kDate, "factory"); kSigning = HMAC(kService, "svc4_request").',
  'Canonical request: method, the path as sent, the sorted RFC 3986 query, the signed headers (host, x-svc-access-key-id, x-svc-timestamp) as name:value lines, their names joined by ";", hex SHA-256 of the body.',
  'String to sign: "SVC-HMAC-SHA256", the timestamp, "YYYYMMDD/factory/svc4_request", hex SHA-256 of the canonical request, joined by newlines.',
  `${HEADER_SIGNATURE} = hex HMAC(kSigning, string to sign). Clock skew allowed: 5 minutes; a signature seen before is refused. A request with these headers is judged by its signature alone.`,
  'The project ships the signer: src/clients/svcSigner.ts.',
].join(' ');

/** Every security scheme the gateway accepts; the device and internal ones come from their authenticators (Auth.securitySchemes). */
export function securitySchemesOf(registered: Record<string, Record<string, unknown>>): Record<string, Record<string, unknown>> {
  return {
    bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'OIDC access token (Keycloak realm acc-<accountId>, idc-<name> with X-Account-Id, or platform)' },
    svc: { type: 'apiKey', in: 'header', name: 'Authorization', description: 'SVC base64(access_key_id:secret_key): a static AKSV… access key, or a temporary ASIA… key from STS together with svcSessionToken' },
    svcSessionToken: { type: 'apiKey', in: 'header', name: 'X-Session-Token', description: 'STS session token of a temporary ASIA… access key (POST /sts/v1/session-token), sent with Authorization: SVC' },
    svcHmacSha256: { type: 'apiKey', in: 'header', name: 'X-SVC-Signature', description: SIGNING },
    svcHmacAccessKeyId: { type: 'apiKey', in: 'header', name: 'X-SVC-Access-Key-Id', description: `the signing factory service's access key id (${HEADER_KEY_ID}); part of SVC-HMAC-SHA256` },
    svcHmacTimestamp: { type: 'apiKey', in: 'header', name: 'X-SVC-Timestamp', description: `RFC 3339 UTC to the second, e.g. 2026-11-22T10:00:00Z (${HEADER_TIMESTAMP}); part of SVC-HMAC-SHA256` },
    standardWebhooks: {
      type: 'apiKey', in: 'header', name: 'webhook-signature',
      description: 'Outbound only (webhooks): the gateway signs deliveries per Standard Webhooks: webhook-signature = "v1," + base64 HMAC-SHA256(secret, webhook-id + "." + webhook-timestamp + "." + body), the secret being the one returned once at creation (whsec_ prefix: base64 key).',
    },
    ...registered,
  };
}

const SECRET_HEADERS = [
  { name: 'webhook-id', in: 'header', required: true, schema: { type: 'string' }, description: 'unique per message; the same on every retry of it (deduplicate by it)', example: 'msg_2b5f3c1e-8a47-4f0e-9d61-7c3b2a1f0e9d' },
  { name: 'webhook-timestamp', in: 'header', required: true, schema: { type: 'string', pattern: '^[0-9]+$' }, description: 'Unix seconds when signed; refuse old ones to stop replays', example: '1795341600' },
  { name: 'webhook-signature', in: 'header', required: true, schema: { type: 'string' }, description: 'v1,<base64 HMAC-SHA256 of id.timestamp.body> (space-separated when several)', example: 'v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=' },
];
const SIGNED_HEADERS = [
  { name: 'X-SVC-Access-Key-Id', in: 'header', required: true, schema: { type: 'string' }, description: "the factory service's own access key id: the backend verifies the gateway like any signed request", example: 'AKSV0123456789ABCDEF' },
  { name: 'X-SVC-Timestamp', in: 'header', required: true, schema: { type: 'string' }, example: '2026-11-22T10:00:00Z' },
  { name: 'X-SVC-Signature', in: 'header', required: true, schema: { type: 'string' }, description: 'SVC-HMAC-SHA256 over the call (see the svcHmacSha256 security scheme)', example: 'cd9ea7fc5891c235369abca637534ea760e6b25271ff7d0969842555c83e17ea' },
];
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const json = (name: string) => ({ 'application/json': { schema: ref(name) } });
const retried = { '2XX': { description: 'taken' }, '4XX': { description: 'refused: retried with backoff, then counted as a failure' }, '5XX': { description: 'failed: retried with backoff' } };

/**
 * What the gateway calls and a user implements (OpenAPI 3.1 `webhooks`): state-change
 * deliveries, a model's enrollment approval, factory backends' provisioning legs and health
 * checks, and an external notification authorization service.
 */
export function webhooksOf(): Record<string, unknown> {
  return {
    thingStateChanged: {
      post: {
        operationId: 'webhookThingStateChanged',
        tags: ['webhooks'],
        summary: 'State-change delivery to a subscription\'s target_url',
        description: 'POSTed to the target_url of each ACTIVE state-change subscription whose filters match, at least once and in order per thing; any 2xx within the timeout takes it, anything else is retried with backoff (after too many failures the subscription is suspended). Signed per Standard Webhooks with the subscription\'s secret.',
        security: [{ standardWebhooks: [] }],
        parameters: SECRET_HEADERS,
        requestBody: { required: true, content: json('StateChangeDelivery') },
        responses: retried,
      },
    },
    enrollmentApproval: {
      post: {
        operationId: 'webhookEnrollmentApproval',
        tags: ['webhooks'],
        summary: 'Enrollment approval asked of a webhook-provisioned model\'s approvalUrl',
        description: 'POSTed when a device enrolls under a model with provisioning_method webhook; signed per Standard Webhooks with the model\'s webhookSecret. Anything but a 2xx `{"approved": true}` within provisioning.timeoutMs (default 5 s) refuses the enrollment (fail closed).',
        security: [{ standardWebhooks: [] }],
        parameters: SECRET_HEADERS,
        requestBody: { required: true, content: json('EnrollmentApprovalRequest') },
        responses: {
          '200': { description: 'the decision', content: json('EnrollmentApprovalAnswer') },
          '4XX': { description: 'refuses the enrollment' },
          '5XX': { description: 'refuses the enrollment' },
        },
      },
    },
    provisioningLeg: {
      post: {
        operationId: 'webhookProvisioningLeg',
        tags: ['webhooks'],
        summary: 'A PROVISION saga leg sent to a factory backend: POST <endpoint_url>/provisioning-legs',
        description: 'Each leg of a provisioning run is POSTed to the factory service\'s backend, signed with SVC-HMAC-SHA256 under the service\'s own credentials. A 2xx accepts the leg; the backend reports the outcome later with POST result_url (/api/v1/things/{thingId}/provisioning-result). 408, 425, 429 and 5xx are retried; other 4xx fail the leg at once.',
        security: [{ svcHmacSha256: [], svcHmacAccessKeyId: [], svcHmacTimestamp: [] }],
        parameters: SIGNED_HEADERS,
        requestBody: { required: true, content: json('ProvisioningLegCall') },
        responses: { '2XX': { description: 'the leg is accepted' }, '4XX': { description: 'the leg fails (408, 425 and 429 are retried)' }, '5XX': { description: 'retried' } },
      },
    },
    factoryHealthCheck: {
      get: {
        operationId: 'webhookFactoryHealthCheck',
        tags: ['webhooks'],
        summary: 'A factory backend\'s health check: GET <endpoint_url>/healthz',
        description: 'Probed by POST /api/v1/factory-services/{id}/health-check with a short timeout; any 2xx is HEALTHY, anything else (or no answer) UNHEALTHY, recorded in last_health_check_*. The body is not read.',
        security: [],
        responses: { '2XX': { description: 'HEALTHY' }, '4XX': { description: 'UNHEALTHY' }, '5XX': { description: 'UNHEALTHY' } },
      },
    },
    notificationAuthorization: {
      post: {
        operationId: 'webhookNotificationAuthorization',
        tags: ['webhooks'],
        summary: 'Notification send authorization at NOTIFY_AUTHZ_URL',
        description: 'When NOTIFY_AUTHZ_URL is set, each publish asks it; an unreachable service or an answer without a boolean allow denies the send (502, fail closed), allow: false denies it (403). Without it the gateway asks its own /internal/notifications/authorize.',
        security: [],
        requestBody: { required: true, content: json('NotificationAuthorizationRequest') },
        responses: {
          '200': { description: 'the decision', content: json('NotificationAuthorizationDecision') },
          '4XX': { description: 'denies the send (502 to the publisher)' },
          '5XX': { description: 'denies the send (502 to the publisher)' },
        },
      },
    },
  };
}
