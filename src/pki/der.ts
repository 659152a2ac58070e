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
