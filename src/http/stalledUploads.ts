import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { PROBLEM_JSON, problemBody } from './errors.js';
import { Problem } from './problem.js';
import { traceparentFor } from './trace.js';
import { lingerClose } from '../lib/lingerClose.js';

/**
 * At shutdown the grace period (SHUTDOWN_TIMEOUT_MS) is for requests making progress. A request
 * still receiving its body that has had no byte for STALL_MS is stalled: once shutdown starts it
 * is answered 503 (problem+json, `Connection: close`) and its connection closed at once, instead
 * of holding the shutdown for the whole grace period and then losing its socket without an answer.
 * One whose body stopped arriving STALL_MS or longer before the signal is answered immediately;
 * one that stops later, STALL_MS after its last byte.
 *
 * Progress is the connection's byte count (`socket.bytesRead`), read only once shutdown started.
 * A body the gateway has not read yet (bytes buffered, or the reader paused) is the gateway's
 * wait, not the client's, and never counts as stalled.
 */
export const STALL_MS = 2000;
const CHECK_EVERY_MS = 100;
/** how long an answered stalled connection may stay half-closed for its client to close it */
const LINGER_MS = 1000;

interface Upload {
  request: FastifyRequest;
  reply: FastifyReply;
  /** the connection's bytes read when last looked at, and since when it has not changed */
  bytes: number;
  since: number;
}

export function installStalledUploadCutoff(app: FastifyInstance, baseUrl: string): void {
  const uploads = new Set<Upload>();
  let timer: NodeJS.Timeout | undefined;

  app.addHook('onRequest', (request, reply, done) => {
    const raw = request.raw;
    // only requests with a body (a GET, a WebSocket upgrade has none) still receiving it
    const hasBody = raw.headers['transfer-encoding'] !== undefined || Number(raw.headers['content-length'] ?? 0) > 0;
    if (hasBody && !raw.complete && raw.socket) {
      const upload: Upload = { request, reply, bytes: raw.socket.bytesRead, since: Date.now() };
      uploads.add(upload);
      reply.raw.once('close', () => uploads.delete(upload));
    }
    done();
  });

  const answer = (u: Upload) => {
    uploads.delete(u);
    const { request, reply } = u;
    reply.hijack(); // Fastify's own pipeline (the body parser's abort error) must not answer again
    const problem = new Problem(503, `the server is shutting down and this request's body stopped arriving (no byte for ${STALL_MS / 1000} s); send it again on a new connection`, { type: 'shutting-down' });
    const body = JSON.stringify(problemBody(baseUrl, request, problem));
    const res = reply.raw;
    res.writeHead(503, {
      'content-type': PROBLEM_JSON, 'content-length': Buffer.byteLength(body), connection: 'close', 'retry-after': '1', traceparent: traceparentFor(request.id),
    });
    // the client may still be sending: a destroy now would be a reset that can discard this answer at the client
    res.end(body, () => lingerClose(request.raw.socket, LINGER_MS));
    request.log.info({ stalledMs: Date.now() - u.since }, 'shutdown: a stalled request body answered 503');
  };

  const check = () => {
    const now = Date.now();
    for (const u of uploads) {
      const raw = u.request.raw;
      if (raw.complete || u.reply.sent || u.reply.raw.headersSent || !raw.socket || raw.socket.destroyed) {
        uploads.delete(u);
        continue;
      }
      const bytes = raw.socket.bytesRead;
      if (bytes !== u.bytes || raw.readableLength > 0 || raw.readableFlowing === false) {
        u.bytes = bytes;
        u.since = now;
      } else if (now - u.since >= STALL_MS) answer(u);
    }
  };

  app.addHook('preClose', (done) => {
    check();
    timer = setInterval(check, CHECK_EVERY_MS).unref();
    done();
  });
  app.addHook('onClose', (_instance, done) => {
    clearInterval(timer);
    done();
  });
}
