import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Logger } from '../log.js';
import type { Cluster } from '../actors/cluster.js';
import { Problem } from './problem.js';
import { sourceKey } from './trustedProxies.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** set by the onRequest hook: the request presents credentials (the identifier it names is read when needed) */
    authAttempt?: { key?: string | null };
  }
}

export interface AuthFailureOptions {
  /** failures allowed per source address, and per credential identifier, within the window */
  limit: number;
  windowSeconds: number;
  /** count in Redis, so that the limits hold across the nodes of a cluster */
  redisUrl?: string;
  /** tells the other nodes about new blocks */
  cluster?: Cluster;
  log: Logger;
}

const BLOCK_TOPIC = 'auth-failures.block';
const sourceId = (address: string) => `src:${sourceKey(address)}`;

/**
 * Routes that take a secret in the body rather than in a header: the identifier to count
 * failures under, and the refusals that mean "wrong secret" (a wrong claim secret is a 403).
 */
const SECRET_IN_BODY: Record<string, { statuses: number[]; key(body: unknown): string | undefined }> = {
  'POST /ddi/v1/enroll': {
    statuses: [401, 403],
    key(body) {
      const b = (body ?? {}) as Record<string, unknown>;
      const parts = [b.manufacturer, b.model, b.serial];
      // the device identity being claimed; a guessed secret names no claim group
      return parts.every((p) => typeof p === 'string') ? `device:${parts.join('/')}` : undefined;
    },
  },
};

/**
 * Brakes on guessing credentials. Each refused authentication (a 401, or a listed route's
 * refusal) counts against the source address and against the credential identifier presented
 * (access key id of `SVC` and of signed `X-SVC-Access-Key-Id` requests, the device identity at
 * enrollment). After `limit` failures within the window, that source, or that identifier from
 * anywhere, is answered 429 with Retry-After for one window, whatever it presents. Successes
 * never count. A bearer token's subject is not counted: it is unverified text that anyone
 * could write to lock a user out, and a signature cannot be guessed anyway.
 *
 * Failures are counted in Redis when REDIS_URL is set (the limit holds across nodes; memory
 * stands in while Redis is unreachable), else in memory. The blocks in force are kept in each
 * node's memory and broadcast to the other nodes, so the request path does no I/O.
 */
export class AuthFailures {
  /** blocks in force on this node: key -> end (ms since epoch); read synchronously on every request */
  private readonly blocks = new Map<string, number>();
  private unsubscribe?: () => void;

  private constructor(
    private readonly counts: RateLimiterAbstract,
    private readonly cluster?: Cluster,
    private readonly redis?: Redis,
  ) {
    this.unsubscribe = cluster?.on<{ key?: unknown; ms?: unknown }>(BLOCK_TOPIC, ({ key, ms }) => {
      if (typeof key === 'string' && typeof ms === 'number' && ms > 0) this.block(key, ms);
    });
  }

  static create(o: AuthFailureOptions): AuthFailures {
    // the limit-th failure blocks: `points` is the number of failures that are still let through
    const shape = { points: o.limit - 1, duration: o.windowSeconds, blockDuration: o.windowSeconds, keyPrefix: 'authfail' };
    const memory = new RateLimiterMemory(shape);
    if (!o.redisUrl) return new AuthFailures(memory, o.cluster);
    // no offline queue: while Redis is away the in-memory limiter counts instead of requests waiting
    const redis = new Redis(o.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    let down = false;
    redis.on('error', (err) => {
      if (!down) o.log.warn({ err: err.message }, 'authentication-failure limits: Redis unreachable; counting in this node only');
      down = true;
    });
    redis.on('ready', () => (down = false));
    const counts = new RateLimiterRedis({ ...shape, storeClient: redis, rejectIfRedisNotReady: true, insuranceLimiter: memory });
    return new AuthFailures(counts, o.cluster, redis);
  }

  private block(id: string, ms: number): void {
    const now = Date.now();
    // blocks of sources that never come back are dropped here rather than by a timer
    if (this.blocks.size >= 10_000) for (const [k, until] of this.blocks) if (until <= now) this.blocks.delete(k);
    this.blocks.set(id, Math.max(this.blocks.get(id) ?? 0, now + ms));
  }

  /** ms left of a block in force, 0 when none (expired blocks are dropped here). */
  private blockedFor(id: string, now: number): number {
    const until = this.blocks.get(id);
    if (until === undefined) return 0;
    if (until > now) return until - now;
    this.blocks.delete(id);
    return 0;
  }

  /** The 429 to answer when the source address or the identifier is blocked (synchronous: no I/O). */
  check(source: string, key?: string): Problem | undefined {
    if (this.blocks.size === 0) return undefined;
    const now = Date.now();
    const bySource = this.blockedFor(sourceId(source), now);
    const byKey = key ? this.blockedFor(`key:${key}`, now) : 0;
    if (!bySource && !byKey) return undefined;
    const seconds = Math.max(1, Math.ceil(Math.max(bySource, byKey) / 1000));
    const what = bySource ? 'from your address' : 'for this credential';
    return new Problem(429, `too many failed authentication attempts ${what}; retry after ${seconds} s`, {
      type: 'too-many-authentication-failures',
      headers: { 'retry-after': String(seconds) },
    });
  }

  /** Counts one failed authentication against the source address and the identifier; blocks on the limit-th. */
  async fail(source: string, key?: string): Promise<void> {
    await Promise.all([sourceId(source), key ? `key:${key}` : undefined].map(async (id) => {
      if (!id) return;
      const res = await this.counts.consume(id).catch((r: unknown) => {
        if (r instanceof RateLimiterRes) return r;
        throw r; // a store error the in-memory limiter could not absorb
      });
      if (res.consumedPoints <= this.counts.points) return;
      const ms = Math.max(res.msBeforeNext, 1000);
      this.block(id, ms);
      await this.cluster?.notify(BLOCK_TOPIC, { key: id, ms });
    }));
  }

  /**
   * Hooks: refuse blocked attempts before authentication runs (install before the auth hook),
   * and count refusals before they are sent (so a client's next request already sees them).
   * The client address is `request.ip`: the socket's, unless the peer is a trusted proxy.
   */
  install(app: FastifyInstance): void {
    const bodyRoute = (request: FastifyRequest) => SECRET_IN_BODY[`${request.method} ${request.routeOptions.url}`];
    // callback hooks: on the hot path (every authenticated request) no promise is made
    // the identifier is decoded only when a block is in force or a failure is counted
    const keyOf = (request: FastifyRequest, attempt: { key?: string | null }) => (attempt.key === undefined ? (attempt.key = headerKey(request) ?? null) : attempt.key) ?? undefined;
    app.addHook('onRequest', (request, _reply, done) => {
      if (!presentsCredentials(request) && !bodyRoute(request)) return done();
      const attempt = (request.authAttempt = {});
      done(this.blocks.size ? this.check(request.ip, keyOf(request, attempt)) : undefined);
    });
    app.addHook('preHandler', (request, _reply, done) => {
      const key = request.authAttempt && bodyRoute(request)?.key(request.body);
      if (!key) return done();
      if (!keyOf(request, request.authAttempt!)) request.authAttempt!.key = key;
      done(this.check(request.ip, key));
    });
    app.addHook('onSend', (request, reply, payload, done) => {
      const attempt = request.authAttempt;
      if (!attempt || (reply.statusCode !== 401 && !bodyRoute(request)?.statuses.includes(reply.statusCode))) return done(null, payload);
      // the refusal stands whatever happens to the counting
      this.fail(request.ip, keyOf(request, attempt))
        .catch((err) => request.log.error({ err }, 'authentication failure could not be counted'))
        .then(() => done(null, payload));
    });
    app.addHook('onClose', async () => {
      this.unsubscribe?.();
      await this.redis?.quit().catch(() => undefined);
    });
  }
}

/** An Authorization header, a signed request's access key id, or a WebSocket bearer subprotocol. */
function presentsCredentials(request: FastifyRequest): boolean {
  const h = request.headers;
  return Boolean(h.authorization || h['x-svc-access-key-id'] || (typeof h['sec-websocket-protocol'] === 'string' && h['sec-websocket-protocol'].startsWith('bearer')));
}

const ACCESS_KEY_ID = /^[A-Z0-9]{4,64}$/;

/** The access key id a request presents (`SVC base64(id:secret)` or `X-SVC-Access-Key-Id`), if well formed. */
function headerKey(request: FastifyRequest): string | undefined {
  const signed = request.headers['x-svc-access-key-id'];
  if (typeof signed === 'string' && ACCESS_KEY_ID.test(signed)) return `akid:${signed}`;
  const auth = request.headers.authorization;
  if (!auth || !/^svc /i.test(auth)) return undefined;
  const decoded = Buffer.from(auth.slice(4).trim().slice(0, 200), 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon > 0 && ACCESS_KEY_ID.test(decoded.slice(0, colon)) ? `akid:${decoded.slice(0, colon)}` : undefined;
}
