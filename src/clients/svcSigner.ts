import crypto from 'node:crypto';

/**
 * SVC-HMAC-SHA256 request signing for the factory surface (DESIGN.md section 7, modelled on
 * SigV4). Used by the gateway to verify, and by tests, the simulator and benchmarks to sign: one
 * implementation, so both sides build the same canonical request byte for byte.
 */
export const ALGORITHM = 'SVC-HMAC-SHA256';
export const SERVICE = 'factory';
export const TERMINATOR = 'svc4_request';
export const HEADER_KEY_ID = 'x-svc-access-key-id';
export const HEADER_TIMESTAMP = 'x-svc-timestamp';
export const HEADER_SIGNATURE = 'x-svc-signature';
/** the signed headers, sorted */
export const SIGNED_HEADERS = ['host', HEADER_KEY_ID, HEADER_TIMESTAMP] as const;
/** RFC 3339 UTC to the second: `2026-11-22T10:00:00Z` */
export const TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})T\d{2}:\d{2}:\d{2}Z$/;

const hmac = (key: crypto.BinaryLike, data: string) => crypto.createHmac('sha256', key).update(data, 'utf8').digest();
const sha256Hex = (data: string | Uint8Array) => crypto.createHash('sha256').update(data).digest('hex');

/** RFC 3986 percent-encoding: only `A-Z a-z 0-9 - _ . ~` stay as they are. */
export function rfc3986(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s; // a malformed escape is signed as sent (the gateway's input guard refuses it anyway)
  }
}

/** The canonical query: names and values decoded, re-encoded per RFC 3986, sorted by name then value. */
export function canonicalQuery(rawQuery: string): string {
  if (rawQuery === '') return '';
  const pairs = rawQuery.split('&').filter((p) => p !== '').map((p) => {
    const eq = p.indexOf('=');
    const [name, value] = eq === -1 ? [p, ''] : [p.slice(0, eq), p.slice(eq + 1)];
    return [rfc3986(decode(name)), rfc3986(decode(value))] as const;
  });
  pairs.sort(([an, av], [bn, bv]) => (an < bn ? -1 : an > bn ? 1 : av < bv ? -1 : av > bv ? 1 : 0));
  return pairs.map(([n, v]) => `${n}=${v}`).join('&');
}

export interface SignInput {
  method: string;
  /** the request target as sent: percent-encoded path, optionally `?query` */
  target: string;
  host: string;
  accessKeyId: string;
  /** `YYYY-MM-DDTHH:MM:SSZ` */
  timestamp: string;
  /** the exact body bytes (none: empty) */
  body?: string | Uint8Array;
}

export function canonicalRequest(i: SignInput): string {
  const q = i.target.indexOf('?');
  const path = q === -1 ? i.target : i.target.slice(0, q);
  const query = q === -1 ? '' : i.target.slice(q + 1);
  const values: Record<(typeof SIGNED_HEADERS)[number], string> = { host: i.host, [HEADER_KEY_ID]: i.accessKeyId, [HEADER_TIMESTAMP]: i.timestamp };
  const headers = SIGNED_HEADERS.map((h) => `${h}:${values[h].trim()}`).join('\n');
  return [i.method.toUpperCase(), path, canonicalQuery(query), headers, SIGNED_HEADERS.join(';'), sha256Hex(i.body ?? '')].join('\n');
}

/** `YYYYMMDD` of a signing timestamp. */
export function dateOf(timestamp: string): string {
  const m = TIMESTAMP.exec(timestamp);
  if (!m) throw new Error(`timestamp ${JSON.stringify(timestamp)} is not RFC 3339 UTC to the second (2026-11-22T10:00:00Z)`);
  return `${m[1]}${m[2]}${m[3]}`;
}

export function stringToSign(timestamp: string, canonical: string): string {
  return [ALGORITHM, timestamp, `${dateOf(timestamp)}/${SERVICE}/${TERMINATOR}`, sha256Hex(canonical)].join('\n');
}

/** kDate -> kService -> kSigning; each key after the first is the raw 32-byte digest. */
export function signingKey(secret: string, yyyymmdd: string): Buffer {
  const kDate = hmac(`SVC4${secret}`, yyyymmdd);
  const kService = hmac(kDate, SERVICE);
  return hmac(kService, TERMINATOR);
}

/** Hex signature of a request. */
export function sign(secret: string, i: SignInput): string {
  const toSign = stringToSign(i.timestamp, canonicalRequest(i));
  return crypto.createHmac('sha256', signingKey(secret, dateOf(i.timestamp))).update(toSign, 'utf8').digest('hex');
}

/** `Date` -> `2026-11-22T10:00:00Z` */
export function signingTimestamp(at: Date = new Date()): string {
  return at.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
}

/** The three headers of a signed request. */
export function signedHeaders(creds: Credentials, i: Omit<SignInput, 'accessKeyId'>): Record<string, string> {
  const signature = sign(creds.secretAccessKey, { ...i, accessKeyId: creds.accessKeyId });
  return { 'X-SVC-Access-Key-Id': creds.accessKeyId, 'X-SVC-Timestamp': i.timestamp, 'X-SVC-Signature': signature };
}

export interface SignedFetchInit {
  method?: string;
  /** JSON-encoded unless a string (sent as is, with Content-Type application/json) */
  body?: unknown;
  headers?: Record<string, string>;
  /** signing time (default now) */
  at?: Date;
}

/**
 * `fetch` with a signed request: signs exactly the bytes sent. The `host` signed is the URL's
 * host (with a non-default port), which is what fetch sends.
 */
export function signedFetch(url: string | URL, creds: Credentials, init: SignedFetchInit = {}): Promise<Response> {
  const u = new URL(url);
  const method = (init.method ?? 'GET').toUpperCase();
  const body = init.body === undefined ? undefined : typeof init.body === 'string' ? init.body : JSON.stringify(init.body);
  const headers: Record<string, string> = { ...init.headers };
  if (body !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
  Object.assign(headers, signedHeaders(creds, { method, target: u.pathname + u.search, host: u.host, timestamp: signingTimestamp(init.at), body }));
  return fetch(u, { method, headers, body });
}
