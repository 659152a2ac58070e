import crypto from 'node:crypto';
import type { IncomingMessage } from 'node:http';

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;

/** W3C trace id of an incoming request (from `traceparent`), or a new one. Used as Fastify's request id. */
export function traceIdOf(req: IncomingMessage): string {
  const header = req.headers.traceparent;
  const m = typeof header === 'string' ? TRACEPARENT.exec(header.trim().toLowerCase()) : null;
  if (m && !/^0+$/.test(m[1])) return m[1];
  return crypto.randomBytes(16).toString('hex');
}

/** The `traceparent` we answer with: same trace, our own span. */
export function traceparentFor(traceId: string): string {
  return `00-${traceId}-${crypto.randomBytes(8).toString('hex')}-01`;
}
