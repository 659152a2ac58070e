import crypto from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Redis } from 'ioredis';
import { Counter, type Registry } from 'prom-client';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Logger } from '../log.js';
import type { Cluster } from '../actors/cluster.js';
import type { Guess } from '../lib/errors.js';
import { Problem } from './problem.js';
import { sourceKey } from './trustedProxies.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** the authentication-failure limits; the error handler hands them every refused guess */
    authFailures?: AuthFailures;
  }
  interface FastifyRequest {
    /** set when a refused guess of this request is being counted; the response waits for it */
    authFailureCount?: Promise<void>;
  }
}

export interface AuthFailureOptions {
  /** wrong secrets of one identifier from one source within the window */
  limit: number;
  /** wrong secrets of one identifier from all sources within the window */
  identifierLimit: number;
  /** counted failures (wrong secrets and unknown identifiers) of one source within the window */
  sourceLimit: number;
  windowSeconds: number;
  /** count in Redis, so that the limits hold across the nodes of a cluster */
  redisUrl?: string;
  /** tells the other nodes about new blocks */
  cluster?: Cluster;
  log: Logger;
  /** where auth_failures_total, auth_blocks_total and auth_throttled_total are registered */
  metrics?: Registry;
}

/** What is counted and blocked: one identifier from one source, one identifier from anywhere, one source. */
export type Scope = 'identifier-source' | 'identifier' | 'source';

const BLOCK_TOPIC = 'auth-failures.block';
const KEY_OF: Record<Scope, (id: string, source: string) => string> = {
  'identifier-source': (id, source) => `p:${id}|${source}`,
  identifier: (id) => `i:${id}`,
  source: (_id, source) => `s:${source}`,
};
const DETAIL: Record<Scope, string> = {
  'identifier-source': 'too many failed authentication attempts for this credential from your address',
  identifier: 'too many failed authentication attempts for this credential, from your address among others',
  source: 'too many failed authentication attempts from your address (credentials that verify are still served)',
};

/**
 * Brakes on guessing credentials (docs/decisions.md, "Authentication failure limits"). Only
 * refusals thrown with a `guess` marker count (src/lib/errors.ts): wrong secrets and unknown
 * identifiers. A cap reached, a revoked, expired or malformed credential, a bearer token (its
 * signature cannot be guessed, its subject is anyone's text), a role refusal: never.
 *
 * - A wrong secret counts against (identifier, source), the identifier, and the source; an
 *   unknown identifier against the source only.
 * - Before verification, 429 when (identifier, source) is blocked (AUTH_FAILURE_LIMIT), or when
 *   the identifier is blocked across sources (AUTH_FAILURE_IDENTIFIER_LIMIT) and this source
 *   failed it within the window. A source that never failed the identifier gets to verify.
 * - A blocked source (AUTH_FAILURE_SOURCE_LIMIT) is still verified: what verifies is served,
 *   counted refusals are answered 429 (so it no longer learns which identifiers exist).
 *
 * So a credential that verifies is never refused for failures of other credentials, and an
 * identifier's lockout never reaches a source that did not fail it.
 *
 * Failures are counted in Redis when REDIS_URL is set (memory stands in while Redis is
 * unreachable), else in memory. The blocks in force are kept in each node's memory and
 * broadcast to the other nodes, so the request path does no I/O while nothing is blocked (and
 * at most one read, of this source's count for an identifier blocked across sources).
 */
export class AuthFailures {
  /** blocks in force on this node: key -> end (ms since epoch); read synchronously */
  private readonly blocks = new Map<string, number>();
  private unsubscribe?: () => void;
  private readonly metrics?: { failures: Counter; blocks: Counter; throttled: Counter };

  private constructor(
    private readonly counts: Record<Scope, RateLimiterAbstract>,
    registry?: Registry,
    private readonly cluster?: Cluster,
    private readonly redis?: Redis,
  ) {
    this.unsubscribe = cluster?.on<{ key?: unknown; ms?: unknown }>(BLOCK_TOPIC, ({ key, ms }) => {
      if (typeof key === 'string' && typeof ms === 'number' && ms > 0) this.block(key, ms);
    });
    if (registry) {
      const counter = (name: string, help: string, labelNames: string[]) =>
        (registry.getSingleMetric(name) as Counter | undefined) ?? new Counter({ name, help, labelNames, registers: [registry] });
      this.metrics = {
        failures: counter('auth_failures_total', 'Refused credential guesses counted by the authentication-failure limits, by scheme and reason (wrong-secret, unknown-identifier)', ['scheme', 'reason']),
        blocks: counter('auth_blocks_total', 'Blocks started by this node, by scope (identifier-source, identifier, source)', ['scope']),
        throttled: counter('auth_throttled_total', 'Requests answered 429 by the authentication-failure limits, by scope (identifier-source, identifier, source)', ['scope']),
      };
    }
  }

  static create(o: AuthFailureOptions): AuthFailures {
    // the limit-th failure blocks: `points` is the number of failures that are still let through
    const shape = (scope: Scope, limit: number) => ({ points: limit - 1, duration: o.windowSeconds, blockDuration: o.windowSeconds, keyPrefix: `authfail:${scope}` });
    const shapes: Record<Scope, ReturnType<typeof shape>> = {
      'identifier-source': shape('identifier-source', o.limit),
      identifier: shape('identifier', o.identifierLimit),
      source: shape('source', o.sourceLimit),
    };
    const memory = (s: Scope) => new RateLimiterMemory(shapes[s]);
    if (!o.redisUrl) return new AuthFailures({ 'identifier-source': memory('identifier-source'), identifier: memory('identifier'), source: memory('source') }, o.metrics, o.cluster);
    // no offline queue: while Redis is away the in-memory limiters count instead of requests waiting
    const redis = new Redis(o.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    let down = false;
    redis.on('error', (err) => {
      if (!down) o.log.warn({ err: err.message }, 'authentication-failure limits: Redis unreachable; counting in this node only');
      down = true;
    });
    redis.on('ready', () => (down = false));
    const inRedis = (s: Scope) => new RateLimiterRedis({ ...shapes[s], storeClient: redis, rejectIfRedisNotReady: true, insuranceLimiter: memory(s) });
    return new AuthFailures({ 'identifier-source': inRedis('identifier-source'), identifier: inRedis('identifier'), source: inRedis('source') }, o.metrics, o.cluster, redis);
  }

  private block(key: string, ms: number): void {
    const now = Date.now();
    // blocks of sources that never come back are dropped here rather than by a timer
    if (this.blocks.size >= 10_000) for (const [k, until] of this.blocks) if (until <= now) this.blocks.delete(k);
    this.blocks.set(key, Math.max(this.blocks.get(key) ?? 0, now + ms));
  }

  /** ms left of a block in force, 0 when none (expired blocks are dropped here). */
  private blockedFor(key: string, now: number): number {
    const until = this.blocks.get(key);
    if (until === undefined) return 0;
    if (until > now) return until - now;
    this.blocks.delete(key);
    return 0;
  }

  private throttled(scope: Scope, ms: number): Problem {
    this.metrics?.throttled.inc({ scope });
    const seconds = Math.max(1, Math.ceil(ms / 1000));
    return new Problem(429, `${DETAIL[scope]}; retry after ${seconds} s`, {
      type: 'too-many-authentication-failures',
      headers: { 'retry-after': String(seconds) },
    });
  }

  /**
   * Before verification: the 429 for identifiers this source may not try now. Synchronous unless
   * an identifier is blocked across sources (then this source's count for it is read).
   */
  check(source: string, identifiers: readonly string[]): Problem | undefined | Promise<Problem | undefined> {
    if (this.blocks.size === 0 || identifiers.length === 0) return undefined;
    const now = Date.now();
    const across: [string, number][] = [];
    for (const id of identifiers) {
      const pair = this.blockedFor(KEY_OF['identifier-source'](id, source), now);
      if (pair) return this.throttled('identifier-source', pair);
      const whole = this.blockedFor(KEY_OF.identifier(id, source), now);
      if (whole) across.push([id, whole]);
    }
    if (across.length === 0) return undefined;
    return Promise.all(across.map(async ([id, ms]) => ((await this.failedFrom(source, id)) ? ms : 0))).then((ms) => {
      const longest = Math.max(...ms);
      return longest ? this.throttled('identifier', longest) : undefined;
    });
  }

  /** This source failed this identifier within the window (a store error answers no: the source gets to verify). */
  private async failedFrom(source: string, id: string): Promise<boolean> {
    const res = await this.counts['identifier-source'].get(KEY_OF['identifier-source'](id, source)).catch(() => null);
    return (res?.consumedPoints ?? 0) > 0;
  }

  /**
   * The error handler's call for a refused guess: counts it (the response waits for the count)
   * and answers the 429 instead when the source is blocked. The identifier is read from the
   * request where the guess's scheme carries it.
   */
  refused(request: FastifyRequest, p: Problem): Problem {
    const guess = p.options.guess!;
    const source = sourceKey(request.ip);
    const blocked = this.blockedFor(KEY_OF.source('', source), Date.now());
    request.authFailureCount = this.fail(source, guess, IDENTIFIER[guess.scheme]?.(request))
      .catch((err) => request.log.error({ err }, 'authentication failure could not be counted'));
    return blocked ? this.throttled('source', blocked) : p;
  }

  /** Counts one refused guess; the limit-th failure of a scope blocks it here and on every node. */
  async fail(source: string, guess: Guess, id: string | undefined): Promise<void> {
    this.metrics?.failures.inc({ scheme: guess.scheme, reason: guess.kind });
    const scopes: Scope[] = id && guess.kind === 'wrong-secret' ? ['identifier-source', 'identifier', 'source'] : ['source'];
    await Promise.all(scopes.map((scope) => this.count(scope, KEY_OF[scope](id ?? '', source))));
  }

  private async count(scope: Scope, key: string): Promise<void> {
    const limiter = this.counts[scope];
    const res = await limiter.consume(key).catch((r: unknown) => {
      if (r instanceof RateLimiterRes) return r;
      throw r; // a store error the in-memory limiter could not absorb
    });
    if (res.consumedPoints <= limiter.points) return;
    // over the limit: a block this node holds already (its own, or heard from another node) stands
    if (this.blockedFor(key, Date.now())) return;
    const ms = Math.max(res.msBeforeNext, 1000);
    this.block(key, ms);
    this.metrics?.blocks.inc({ scope });
    await this.cluster?.notify(BLOCK_TOPIC, { key, ms });
  }

  /**
   * Hooks: refuse blocked identifiers before authentication runs (install before the auth hook;
   * identifiers in the body, at enrollment, before the handler), and let a response wait for
   * its failure to be counted (so the client's next request already sees a block). The client
   * address is `request.ip`: the socket's, unless the peer is a trusted proxy.
   */
  install(app: FastifyInstance): void {
    app.decorate<AuthFailures>('authFailures', this as AuthFailures);
    // callback hooks: on the hot path no promise is made, and nothing is read while nothing is blocked
    app.addHook('onRequest', (request, _reply, done) => {
      if (this.blocks.size === 0) return done();
      settle(this.check(sourceKey(request.ip), headerIdentifiers(request)), done);
    });
    app.addHook('preHandler', (request, _reply, done) => {
      if (this.blocks.size === 0 || !BODY_ROUTES.has(`${request.method} ${request.routeOptions.url}`)) return done();
      const id = deviceIdentity(request);
      settle(id ? this.check(sourceKey(request.ip), [id]) : undefined, done);
    });
    app.addHook('onSend', (request, _reply, payload, done) => {
      if (!request.authFailureCount) return done(null, payload);
      void request.authFailureCount.then(() => done(null, payload));
    });
    app.addHook('onClose', async () => {
      this.unsubscribe?.();
      await this.redis?.quit().catch(() => undefined);
    });
  }
}

function settle(result: Problem | undefined | Promise<Problem | undefined>, done: (err?: Error) => void): void {
  if (!(result instanceof Promise)) return done(result);
  result.then((p) => done(p), (err: Error) => done(err));
}

/** Routes whose credential (the device identity and its claim secret or derived key) is in the body. */
const BODY_ROUTES = new Set(['POST /ddi/v1/enroll']);

const ACCESS_KEY_ID = /^[A-Z0-9]{4,64}$/;

/** `SVC base64(id:secret)`: the access key id, if well formed. */
function svcKeyId(request: FastifyRequest): string | undefined {
  const auth = request.headers.authorization;
  if (!auth || !/^svc /i.test(auth)) return undefined;
  const decoded = Buffer.from(auth.slice(4).trim().slice(0, 200), 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon > 0 && ACCESS_KEY_ID.test(decoded.slice(0, colon)) ? `akid:${decoded.slice(0, colon)}` : undefined;
}

/** A signed request's `X-SVC-Access-Key-Id`, if well formed. */
function signedKeyId(request: FastifyRequest): string | undefined {
  const id = request.headers['x-svc-access-key-id'];
  return typeof id === 'string' && ACCESS_KEY_ID.test(id) ? `akid:${id}` : undefined;
}

/** X-Internal-Secret: one secret, so one identifier. */
const internal = (request: FastifyRequest) => (request.headers['x-internal-secret'] !== undefined ? 'internal' : undefined);

/** The device identity claimed at enrollment (manufacturer/model/serial), hashed: the key's size is bounded. */
function deviceIdentity(request: FastifyRequest): string | undefined {
  const b = (request.body ?? {}) as Record<string, unknown>;
  const parts = [b.manufacturer, b.model, b.serial];
  if (!parts.every((p) => typeof p === 'string')) return undefined;
  // the model as a descriptor or an id: FFF1:8001 and fff1:8001 name the same one
  const tuple = JSON.stringify([parts[0], (parts[1] as string).toUpperCase(), parts[2]]);
  return `device:${crypto.createHash('sha256').update(tuple).digest('base64url').slice(0, 22)}`;
}

/**
 * Where each scheme carries the identifier a wrong secret is counted under. Enrollment tokens
 * name nothing but themselves: a wrong one is an unknown identifier, counted against the source.
 */
const IDENTIFIER: Partial<Record<Guess['scheme'], (request: FastifyRequest) => string | undefined>> = {
  svc: svcKeyId,
  'svc-hmac': signedKeyId,
  internal,
  'claim-secret': deviceIdentity,
  'symmetric-key': deviceIdentity,
};

/** The identifiers a request presents in its headers (checked before any authentication). */
function headerIdentifiers(request: FastifyRequest): string[] {
  const ids: string[] = [];
  for (const read of [svcKeyId, signedKeyId, internal]) {
    const id = read(request);
    if (id) ids.push(id);
  }
  return ids;
}
