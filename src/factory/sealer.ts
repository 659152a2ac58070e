import crypto from 'node:crypto';

/**
 * AES-256-GCM sealing of factory-service secrets: the gateway must recompute HMACs with them, so
 * they cannot be stored as hashes. Layout: 12-byte nonce | 16-byte tag | ciphertext (the same as
 * the trust domain's sealer, which this domain may not import).
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
