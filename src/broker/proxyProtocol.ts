/**
 * PROXY protocol version 2 (https://www.haproxy.org/download/2.6/doc/proxy-protocol.txt), the
 * binary header a TLS terminator (HAProxy `send-proxy-v2`) writes before the first byte of the
 * connection it opens to the broker: the client's addresses and, as TLVs, what the terminator
 * learned of the TLS session (whether a client certificate was sent and verified, its CN) and a
 * unique id (which the gateway's HAProxy configuration fills with the certificate's serial and
 * notBefore). Parsed strictly: version 2, the PROXY or LOCAL command, TCP over IPv4 or IPv6 (or
 * UNSPEC for LOCAL), TLVs that fit their header exactly, no duplicate SSL TLV, a CRC32C TLV that
 * matches when sent, and a header of at most MAX_HEADER_BYTES.
 */

/** the 12 bytes every v2 header starts with */
export const SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
/** bytes of a header the broker reads at most (signature, fixed part, addresses and TLVs): HAProxy sends far less */
export const MAX_HEADER_BYTES = 2048;

export const PP2_TYPE = { ALPN: 0x01, AUTHORITY: 0x02, CRC32C: 0x03, NOOP: 0x04, UNIQUE_ID: 0x05, SSL: 0x20, NETNS: 0x30 } as const;
export const PP2_SUBTYPE_SSL = { VERSION: 0x21, CN: 0x22, CIPHER: 0x23, SIG_ALG: 0x24, KEY_ALG: 0x25 } as const;
/** bits of the SSL TLV's `client` field */
export const PP2_CLIENT = { SSL: 0x01, CERT_CONN: 0x02, CERT_SESS: 0x04 } as const;

export interface ProxySsl {
  /** PP2_CLIENT bits */
  client: number;
  /** the terminator's certificate verification result: 0 = verified (X509_V_OK) */
  verify: number;
  version?: string;
  cn?: string;
  cipher?: string;
}

export interface ProxyHeader {
  command: 'LOCAL' | 'PROXY';
  /** 'UNSPEC' with the LOCAL command (a terminator's own health check) */
  family: 'INET' | 'INET6' | 'UNSPEC';
  source?: { address: string; port: number };
  destination?: { address: string; port: number };
  ssl?: ProxySsl;
  uniqueId?: Buffer;
  authority?: string;
  alpn?: string;
  /** every TLV as received, by type (the last of a repeated type) */
  tlvs: Map<number, Buffer>;
  /** bytes of the header (signature included): the connection's MQTT bytes start after them */
  length: number;
}

export class ProxyHeaderError extends Error {}

/**
 * Parses a header at the start of `buf`: the header, or undefined when `buf` is a valid beginning
 * that needs more bytes. Throws ProxyHeaderError on anything else (the connection is then closed).
 */
export function parseProxyHeader(buf: Buffer): ProxyHeader | undefined {
  const prefix = Math.min(buf.length, SIGNATURE.length);
  if (!buf.subarray(0, prefix).equals(SIGNATURE.subarray(0, prefix))) throw new ProxyHeaderError('no PROXY protocol v2 signature');
  if (buf.length < 16) return undefined;
  const versionCommand = buf[12];
  if (versionCommand >> 4 !== 2) throw new ProxyHeaderError(`PROXY protocol version ${versionCommand >> 4} (only 2 is accepted)`);
  const commandBits = versionCommand & 0x0f;
  if (commandBits > 1) throw new ProxyHeaderError(`unknown PROXY command ${commandBits}`);
  const command = commandBits === 0 ? 'LOCAL' : 'PROXY';
  const familyBits = buf[13] >> 4;
  const transport = buf[13] & 0x0f;
  const length = buf.readUInt16BE(14);
  const total = 16 + length;
  if (total > MAX_HEADER_BYTES) throw new ProxyHeaderError(`PROXY header of ${total} bytes (at most ${MAX_HEADER_BYTES})`);
  if (buf.length < total) return undefined;
  let family: ProxyHeader['family'];
  let addressBytes: number;
  if (familyBits === 1 && transport === 1) [family, addressBytes] = ['INET', 12];
  else if (familyBits === 2 && transport === 1) [family, addressBytes] = ['INET6', 36];
  else if (familyBits === 0 && transport === 0 && command === 'LOCAL') [family, addressBytes] = ['UNSPEC', 0];
  else throw new ProxyHeaderError(`PROXY family/transport 0x${buf[13].toString(16).padStart(2, '0')} (only TCP over IPv4 or IPv6)`);
  if (length < addressBytes) throw new ProxyHeaderError('PROXY header shorter than its addresses');
  const header: ProxyHeader = { command, family, tlvs: new Map(), length: total };
  if (family === 'INET') {
    header.source = { address: ipv4(buf, 16), port: buf.readUInt16BE(24) };
    header.destination = { address: ipv4(buf, 20), port: buf.readUInt16BE(26) };
  } else if (family === 'INET6') {
    header.source = { address: ipv6(buf, 16), port: buf.readUInt16BE(48) };
    header.destination = { address: ipv6(buf, 32), port: buf.readUInt16BE(50) };
  }
  const tlvStart = 16 + addressBytes;
  for (const { type, value, offset } of tlvList(buf, tlvStart, total)) {
    if (header.tlvs.has(type) && type !== PP2_TYPE.NOOP) throw new ProxyHeaderError(`PROXY TLV 0x${type.toString(16)} sent twice`);
    header.tlvs.set(type, value);
    switch (type) {
      case PP2_TYPE.SSL: header.ssl = sslTlv(value); break;
      case PP2_TYPE.UNIQUE_ID:
        if (value.length > 128) throw new ProxyHeaderError('PROXY unique id longer than 128 bytes');
        header.uniqueId = value;
        break;
      case PP2_TYPE.AUTHORITY: header.authority = value.toString('utf8'); break;
      case PP2_TYPE.ALPN: header.alpn = value.toString('latin1'); break;
      case PP2_TYPE.CRC32C: {
        if (value.length !== 4) throw new ProxyHeaderError('PROXY CRC32C TLV is not 4 bytes');
        const copy = Buffer.from(buf.subarray(0, total));
        copy.fill(0, offset, offset + 4);
        if (crc32c(copy) !== value.readUInt32BE(0)) throw new ProxyHeaderError('PROXY header CRC32C does not match');
        break;
      }
      default: break;
    }
  }
  return header;
}

function* tlvList(buf: Buffer, start: number, end: number): Generator<{ type: number; value: Buffer; offset: number }> {
  let pos = start;
  while (pos < end) {
    if (pos + 3 > end) throw new ProxyHeaderError('PROXY TLV header cut short');
    const type = buf[pos];
    const len = buf.readUInt16BE(pos + 1);
    if (pos + 3 + len > end) throw new ProxyHeaderError(`PROXY TLV 0x${type.toString(16)} runs past the header`);
    yield { type, value: buf.subarray(pos + 3, pos + 3 + len), offset: pos + 3 };
    pos += 3 + len;
  }
}

function sslTlv(value: Buffer): ProxySsl {
  if (value.length < 5) throw new ProxyHeaderError('PROXY SSL TLV shorter than 5 bytes');
  const ssl: ProxySsl = { client: value[0], verify: value.readUInt32BE(1) };
  const seen = new Set<number>();
  for (const sub of tlvList(value, 5, value.length)) {
    if (seen.has(sub.type)) throw new ProxyHeaderError(`PROXY SSL sub-TLV 0x${sub.type.toString(16)} sent twice`);
    seen.add(sub.type);
    if (sub.type === PP2_SUBTYPE_SSL.VERSION) ssl.version = sub.value.toString('latin1');
    else if (sub.type === PP2_SUBTYPE_SSL.CN) ssl.cn = sub.value.toString('utf8');
    else if (sub.type === PP2_SUBTYPE_SSL.CIPHER) ssl.cipher = sub.value.toString('latin1');
  }
  return ssl;
}

const ipv4 = (buf: Buffer, at: number) => `${buf[at]}.${buf[at + 1]}.${buf[at + 2]}.${buf[at + 3]}`;
function ipv6(buf: Buffer, at: number): string {
  const groups: string[] = [];
  for (let i = 0; i < 8; i++) groups.push(buf.readUInt16BE(at + i * 2).toString(16));
  return groups.join(':');
}

let crcTable: Uint32Array | undefined;
/** CRC32C (Castagnoli), as the PROXY protocol's PP2_TYPE_CRC32C */
export function crc32c(buf: Uint8Array): number {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let crc = 0xffffffff;
  for (const byte of buf) crc = crcTable[(crc ^ byte) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** A device identity the terminator vouches for (see `deviceIdentity`). */
export interface ProxiedIdentity { cn: string; serial: string; notBefore?: Date }

/**
 * The device identity of a PROXY header, or why there is none. Required: the PROXY command, the
 * SSL TLV with a client certificate (on this connection or its resumed session) that the
 * terminator verified (`verify` = 0), its CN, and a unique id `<serial hex>` or
 * `<serial hex>:<notBefore as YYMMDDhhmmssZ or YYYYMMDDhhmmssZ>` (docs/haproxy-mqtt-tls.cfg:
 * `unique-id-format %[ssl_c_serial,hex]:%[ssl_c_notbefore]`).
 */
export function deviceIdentity(header: ProxyHeader): ProxiedIdentity | string {
  if (header.command !== 'PROXY') return 'LOCAL command (no client behind it)';
  const ssl = header.ssl;
  if (!ssl || !(ssl.client & PP2_CLIENT.SSL)) return 'no SSL TLV: the client did not use TLS';
  if (!(ssl.client & (PP2_CLIENT.CERT_CONN | PP2_CLIENT.CERT_SESS))) return 'no client certificate';
  if (ssl.verify !== 0) return `client certificate not verified (verify result ${ssl.verify})`;
  if (!ssl.cn) return 'no certificate CN TLV';
  const id = header.uniqueId?.toString('latin1') ?? '';
  const match = /^([0-9a-fA-F]{1,64})(?::(\d{12}|\d{14})Z)?$/.exec(id);
  if (!match) return 'no certificate serial in the unique id TLV';
  const identity: ProxiedIdentity = { cn: ssl.cn, serial: match[1].toUpperCase() };
  if (match[2]) {
    const d = match[2].length === 12 ? (Number(match[2].slice(0, 2)) >= 50 ? '19' : '20') + match[2] : match[2];
    const at = new Date(`${d.slice(0, 4)}-${d.slice(4, 6)}-${d.slice(6, 8)}T${d.slice(8, 10)}:${d.slice(10, 12)}:${d.slice(12, 14)}Z`);
    if (!Number.isNaN(at.getTime())) identity.notBefore = at;
  }
  return identity;
}

export interface ProxyHeaderParts {
  command?: 'LOCAL' | 'PROXY';
  source?: { address: string; port: number };
  destination?: { address: string; port: number };
  ssl?: { client: number; verify: number; cn?: string; version?: string };
  uniqueId?: string;
  /** raw TLVs appended after the others */
  extra?: { type: number; value: Buffer }[];
  crc32c?: boolean;
}

/** Builds a v2 header (what a terminator writes): for tests, the benchmark and tools. */
export function buildProxyHeader(parts: ProxyHeaderParts): Buffer {
  const tlv = (type: number, value: Buffer) => {
    const head = Buffer.alloc(3);
    head[0] = type;
    head.writeUInt16BE(value.length, 1);
    return Buffer.concat([head, value]);
  };
  const tlvs: Buffer[] = [];
  if (parts.ssl) {
    const fixed = Buffer.alloc(5);
    fixed[0] = parts.ssl.client;
    fixed.writeUInt32BE(parts.ssl.verify, 1);
    const subs = [fixed];
    if (parts.ssl.version) subs.push(tlv(PP2_SUBTYPE_SSL.VERSION, Buffer.from(parts.ssl.version)));
    if (parts.ssl.cn !== undefined) subs.push(tlv(PP2_SUBTYPE_SSL.CN, Buffer.from(parts.ssl.cn)));
    tlvs.push(tlv(PP2_TYPE.SSL, Buffer.concat(subs)));
  }
  if (parts.uniqueId !== undefined) tlvs.push(tlv(PP2_TYPE.UNIQUE_ID, Buffer.from(parts.uniqueId)));
  for (const e of parts.extra ?? []) tlvs.push(tlv(e.type, e.value));
  if (parts.crc32c) tlvs.push(tlv(PP2_TYPE.CRC32C, Buffer.alloc(4)));
  const command = parts.command ?? 'PROXY';
  const src = parts.source ?? { address: '192.0.2.10', port: 50000 };
  const dst = parts.destination ?? { address: '192.0.2.1', port: 8883 };
  let addresses = Buffer.alloc(0);
  let familyByte = 0x00;
  if (command === 'PROXY' || parts.source) {
    familyByte = 0x11;
    addresses = Buffer.alloc(12);
    src.address.split('.').forEach((o, i) => (addresses[i] = Number(o)));
    dst.address.split('.').forEach((o, i) => (addresses[4 + i] = Number(o)));
    addresses.writeUInt16BE(src.port, 8);
    addresses.writeUInt16BE(dst.port, 10);
  }
  const body = Buffer.concat([addresses, ...tlvs]);
  const fixed = Buffer.alloc(4);
  fixed[0] = 0x20 | (command === 'PROXY' ? 1 : 0);
  fixed[1] = familyByte;
  fixed.writeUInt16BE(body.length, 2);
  const header = Buffer.concat([SIGNATURE, fixed, body]);
  if (parts.crc32c) header.writeUInt32BE(crc32c(header), header.length - 4);
  return header;
}
