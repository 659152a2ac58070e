import crypto from 'node:crypto';
import type { IncomingMessage } from 'node:http';

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;

// Ids come from a pool of random bytes refilled 4 KiB at a time: one randomBytes call per request
// and response cost about an eighth of the gateway's CPU under load (bench:auth profile).
const POOL_SIZE = 4096;
let pool = Buffer.alloc(0);
let offset = POOL_SIZE;

function randomHex(bytes: number): string {
  if (offset + bytes > pool.length) {
    pool = crypto.randomBytes(POOL_SIZE);
    offset = 0;
  }
  const hex = pool.toString('hex', offset, offset + bytes);
  offset += bytes;
  return hex;
}

/** W3C trace id of an incoming request (from `traceparent`), or a new one. Used as Fastify's request id. */
export function traceIdOf(req: IncomingMessage): string {
  const header = req.headers.traceparent;
  const m = typeof header === 'string' ? TRACEPARENT.exec(header.trim().toLowerCase()) : null;
  if (m && !/^0+$/.test(m[1])) return m[1];
  return randomHex(16);
}

/** The `traceparent` we answer with: same trace, our own span. */
export function traceparentFor(traceId: string): string {
  return `00-${traceId}-${randomHex(8)}-01`;
}
