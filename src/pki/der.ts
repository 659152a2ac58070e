import crypto from 'node:crypto';

/**
 * The few DER encodings a device certificate's TBSCertificate needs (X.690). Kept tiny on
 * purpose: the constant parts (issuer, extensions, algorithm) come pre-encoded from
 * @peculiar/x509; only the per-device fields are encoded here.
 */
function length(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

export function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = content.length === 1 ? content[0] : Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), length(body.length), body]);
}

export const sequence = (...content: Buffer[]) => tlv(0x30, ...content);
export const set = (...content: Buffer[]) => tlv(0x31, ...content);
export const octetString = (content: Buffer) => tlv(0x04, content);
export const utf8String = (s: string) => tlv(0x0c, Buffer.from(s, 'utf8'));
/** context-specific, constructed ([n] EXPLICIT) */
export const explicit = (n: number, ...content: Buffer[]) => tlv(0xa0 | n, ...content);
export const bitString = (content: Buffer) => tlv(0x03, Buffer.from([0]), content);

/** A non-negative INTEGER from big-endian bytes (hex). */
export function integerFromHex(hex: string): Buffer {
  let bytes = Buffer.from(hex.length % 2 ? '0' + hex : hex, 'hex');
  let i = 0;
  while (i < bytes.length - 1 && bytes[i] === 0 && !(bytes[i + 1] & 0x80)) i++;
  bytes = bytes.subarray(i);
  if (bytes[0] & 0x80) bytes = Buffer.concat([Buffer.from([0]), bytes]);
  return tlv(0x02, bytes);
}

export function oid(dotted: string): Buffer {
  const parts = dotted.split('.').map(Number);
  const out: number[] = [parts[0] * 40 + parts[1]];
  for (const p of parts.slice(2)) {
    const chunk: number[] = [p & 0x7f];
    for (let v = Math.floor(p / 128); v > 0; v = Math.floor(v / 128)) chunk.unshift((v & 0x7f) | 0x80);
    out.push(...chunk);
  }
  return tlv(0x06, Buffer.from(out));
}

/** RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050. */
export function time(d: Date): Buffer {
  const iso = d.toISOString();
  const compact = iso.slice(0, 19).replace(/[-:T]/g, '') + 'Z';
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(compact.slice(2), 'ascii')) : tlv(0x18, Buffer.from(compact, 'ascii'));
}

const P256_SPKI_PREFIX = Buffer.from('3059301306072a8648ce3d020106082a8648ce3d030107034200', 'hex');
// PKCS#8 { version 0, id-ecPublicKey P-256, ECPrivateKey { version 1, d, [1] public key } }, as OpenSSL writes it
const P256_PKCS8_PREFIX = Buffer.from('308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420', 'hex');
const P256_PKCS8_PUBLIC = Buffer.from('a144034200', 'hex');

/** A new EC P-256 key pair from OpenSSL, encoded here: SPKI DER and PKCS#8 PEM (RFC 5480, 5915, 5958). */
export function p256KeyPair(): { spki: Buffer; privateKeyPem: string } {
  const ecdh = crypto.createECDH('prime256v1');
  return p256Encodings(ecdh.generateKeys(), ecdh.getPrivateKey());
}

/** The encodings of a P-256 key from its uncompressed point (65 bytes) and its scalar (OpenSSL drops leading zero bytes). */
export function p256Encodings(point: Buffer, d: Buffer): { spki: Buffer; privateKeyPem: string } {
  const scalar = d.length === 32 ? d : Buffer.concat([Buffer.alloc(32 - d.length), d]);
  const pkcs8 = Buffer.concat([P256_PKCS8_PREFIX, scalar, P256_PKCS8_PUBLIC, point]);
  const lines = pkcs8.toString('base64').match(/.{1,64}/g)!.join('\n');
  return { spki: Buffer.concat([P256_SPKI_PREFIX, point]), privateKeyPem: `-----BEGIN PRIVATE KEY-----\n${lines}\n-----END PRIVATE KEY-----\n` };
}
