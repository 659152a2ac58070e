import crypto from 'node:crypto';

/** SHA-256 digest (how secrets are stored). */
export const sha256 = (value: string | Buffer): Buffer => crypto.hash('sha256', value, 'buffer');

/** Hex SHA-256 digest. */
export const sha256Hex = (value: string | Buffer): string => crypto.hash('sha256', value, 'hex');

/** Constant-time comparison of a presented secret with a stored SHA-256 hash. */
export function hashMatches(secret: string, storedHash: Buffer): boolean {
  return safeEqual(sha256(secret), storedHash);
}

/** ISO 8601 UTC of a timestamp column (null stays null). */
export function iso(d: Date | string | number): string;
export function iso(d: Date | string | number | null | undefined): string | null;
export function iso(d: Date | string | number | null | undefined): string | null {
  return d === null || d === undefined ? null : new Date(d).toISOString();
}

/** Constant-time comparison of two digests. */
export function safeEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && crypto.timingSafeEqual(a, b);
}

/** Random bearer secret with a readable prefix (`cgs_`, `et_`, `ac_`): 256 bits, base64url. */
export function newSecret(prefix: string): string {
  return prefix + crypto.randomBytes(32).toString('base64url');
}
