import crypto from 'node:crypto';

/** Random bearer secret with a readable prefix (`cgs_`, `et_`, `ac_`): 256 bits, base64url. */
export function newSecret(prefix: string): string {
  return prefix + crypto.randomBytes(32).toString('base64url');
}

export function sha256(value: string): Buffer {
  return crypto.createHash('sha256').update(value, 'utf8').digest();
}

export function safeEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && crypto.timingSafeEqual(a, b);
}

/**
 * AES-256-GCM sealing for the few secrets the gateway must read back (a model's symmetric group
 * key and webhook secret: HMACs are recomputed with them; a server-generated device key, returned
 * again on an idempotent re-claim). Layout: 12-byte nonce | 16-byte tag | ciphertext.
 */
export class Sealer {
  constructor(private readonly key: Buffer) {}

  seal(plain: string): Buffer {
    const iv = crypto.randomBytes(12);
    const cipher = crypto.createCipheriv('aes-256-gcm', this.key, iv);
    const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), body]);
  }

  open(sealed: Buffer): string {
    const decipher = crypto.createDecipheriv('aes-256-gcm', this.key, sealed.subarray(0, 12));
    decipher.setAuthTag(sealed.subarray(12, 28));
    return Buffer.concat([decipher.update(sealed.subarray(28)), decipher.final()]).toString('utf8');
  }
}
