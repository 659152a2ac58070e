import crypto from 'node:crypto';

/** Key material of access keys in the spec formats (shown once; only SHA-256 hashes are stored). */
export const newAccessKeyId = (prefix: string): string => prefix + crypto.randomBytes(8).toString('hex').toUpperCase();
/** 40 random bytes, 54 Base64url characters. */
export const newSecretKey = (): string => crypto.randomBytes(40).toString('base64url');
/** 32 random bytes, 43 Base64url characters. */
export const newSessionToken = (): string => crypto.randomBytes(32).toString('base64url');
