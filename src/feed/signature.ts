import crypto from 'node:crypto';

/**
 * Standard Webhooks signing (https://www.standardwebhooks.com, DESIGN.md section 7): the secret
 * is `whsec_` + base64 of 32 random bytes, whose decoded bytes are the HMAC-SHA256 key; a
 * delivery carries `webhook-id`, `webhook-timestamp` (Unix seconds) and `webhook-signature:
 * v1,<base64 HMAC of "id.timestamp.body">`. Receivers verify with any Standard Webhooks library.
 */
export const SECRET_PREFIX = 'whsec_';

export const newWebhookSecret = (): string => SECRET_PREFIX + crypto.randomBytes(32).toString('base64');

export function signWebhook(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.slice(SECRET_PREFIX.length), 'base64');
  return `v1,${crypto.createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
}
