import type { Cluster } from '../actors/cluster.js';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import { sha256, safeEqual } from '../lib/encoding.js';
import { unauthenticated, type Guess } from '../lib/errors.js';
import { FACTORY_SERVICE_ROLE, type Principal } from '../http/auth/principal.js';
import { ALGORITHM, HEADER_KEY_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, TIMESTAMP, sign } from '../clients/svcSigner.js';
import * as repo from './repo.js';
import { effectivePolicy } from './policy.js';
import type { Sealer } from '../pki/sealer.js';

/** Allowed distance between the signing timestamp and the gateway's clock (DESIGN.md section 7). */
export const MAX_SKEW_MS = 5 * 60_000;
export { FACTORY_SERVICE_ROLE } from '../http/auth/principal.js';

const SIGNATURE = /^[0-9a-f]{64}$/;
export const SIGNING_CHANGED_TOPIC = 'factory.signing-changed';
/** A safety net only: changes reach every node's cache at once through the cluster. */
const CACHE_TTL_MS = 30_000;
const CACHE_MAX = 10_000;

/**
 * Signing identities by access key id, with the service's policy, cached per node: a signed
 * request then costs one database round trip (the replay insert). Rotation, confirmation, delete
 * and a policy change broadcast the key, and every node drops it; a lookup that raced with a
 * change is not cached (generation check). Unknown keys are never cached, so a new key works at
 * once everywhere.
 */
export class SigningIdentities {
  private readonly cache = new Map<string, { row: repo.SigningRow; at: number }>();
  private generation = 0;

  constructor(private readonly sql: Sql, private readonly cluster: Cluster) {
    cluster.on<{ accessKeyId?: unknown }>(SIGNING_CHANGED_TOPIC, ({ accessKeyId }) => {
      if (typeof accessKeyId === 'string') this.drop(accessKeyId);
    });
  }

  async get(accessKeyId: string): Promise<repo.SigningRow | undefined> {
    const hit = this.cache.get(accessKeyId);
    if (hit && Date.now() - hit.at < CACHE_TTL_MS) return hit.row;
    const generation = this.generation;
    const row = await repo.signingIdentity(this.sql, accessKeyId);
    if (row && generation === this.generation) {
      if (this.cache.size >= CACHE_MAX) this.cache.clear();
      this.cache.set(accessKeyId, { row, at: Date.now() });
    }
    return row;
  }

  /** After a committed change of the key's secrets, state or policy: this node and then every other. */
  changed(accessKeyId: string): Promise<void> {
    return this.cluster.broadcast(SIGNING_CHANGED_TOPIC, { accessKeyId });
  }

  private drop(accessKeyId: string): void {
    this.generation++;
    this.cache.delete(accessKeyId);
  }
}

/** What verification reads of a request: no Fastify here, routes adapt. */
export interface SignedRequest {
  method: string;
  /** the request target as sent (path and query, percent-encoded) */
  target: string;
  host: string | undefined;
  headers: Record<string, string | string[] | undefined>;
  /** the exact body bytes, undefined when there was none */
  body: Buffer | undefined;
}

const fail = (detail: string, type: string, guess?: Guess['kind']) =>
  unauthenticated(detail, { type, title: 'Signed request refused', ...(guess ? { guess: { scheme: 'svc-hmac', kind: guess } } : {}) });

/**
 * Remembers accepted signatures in Postgres (shared by every node). Concurrent requests are
 * batched into one insert per event-loop turn, so the check costs about one round trip per
 * batch instead of one per request; within a batch the first of two equal signatures wins.
 */
export class ReplayGuard {
  private pending: { hash: Buffer; expiresAt: Date; resolve(fresh: boolean): void; reject(err: unknown): void }[] = [];

  constructor(private readonly sql: Sql) {}

  /** true the first time a signature is seen; false for a replay */
  remember(hash: Buffer, expiresAt: Date): Promise<boolean> {
    return new Promise((resolve, reject) => {
      if (this.pending.length === 0) setImmediate(() => void this.flush());
      this.pending.push({ hash, expiresAt, resolve, reject });
    });
  }

  private async flush(): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    const first = new Map<string, (typeof batch)[number]>();
    for (const p of batch) {
      const key = p.hash.toString('hex');
      if (first.has(key)) p.resolve(false);
      else first.set(key, p);
    }
    const entries = [...first.values()];
    try {
      const fresh = await repo.rememberSignatures(this.sql, entries.map((p) => p.hash), entries.map((p) => p.expiresAt));
      for (const p of entries) p.resolve(fresh.has(p.hash.toString('hex')));
    } catch (err) {
      for (const p of entries) p.reject(err);
    }
  }
}

/**
 * Verifies SVC-HMAC-SHA256 signed requests and answers the factory service that signed. Each
 * refusal is a 401 with its own detail and type: missing header, malformed or skewed timestamp,
 * unknown key, bad signature, replay. The replay check runs last, so only a valid signature is
 * recorded (an attacker cannot fill the table, nor burn a client's signature in advance).
 */
export class SignedRequests {
  constructor(private readonly d: { identities: SigningIdentities; replays: ReplayGuard; clock: Clock; sealer: Sealer }) {}

  static presents(headers: SignedRequest['headers']): boolean {
    return headers[HEADER_KEY_ID] !== undefined || headers[HEADER_SIGNATURE] !== undefined || headers[HEADER_TIMESTAMP] !== undefined;
  }

  async verify(req: SignedRequest): Promise<Principal> {
    const header = (name: string) => {
      const v = req.headers[name];
      if (typeof v !== 'string' || v === '') throw fail(`signed request (${ALGORITHM}) lacks the ${canonicalName(name)} header; send X-SVC-Access-Key-Id, X-SVC-Timestamp and X-SVC-Signature`, 'signature-missing-header');
      return v;
    };
    const accessKeyId = header(HEADER_KEY_ID);
    const timestamp = header(HEADER_TIMESTAMP);
    const signature = header(HEADER_SIGNATURE).toLowerCase();
    if (!req.host) throw fail('signed request lacks the Host header, which the signature covers', 'signature-missing-header');

    if (!TIMESTAMP.test(timestamp) || Number.isNaN(Date.parse(timestamp))) {
      throw fail(`X-SVC-Timestamp ${JSON.stringify(timestamp.slice(0, 40))} is not RFC 3339 UTC to the second (2026-11-22T10:00:00Z)`, 'signature-timestamp-invalid');
    }
    const signedAt = Date.parse(timestamp);
    const now = this.d.clock.now().getTime();
    if (Math.abs(now - signedAt) > MAX_SKEW_MS) {
      throw fail(`X-SVC-Timestamp ${timestamp} is more than 5 minutes from the gateway's time (${new Date(now).toISOString()}); sign with a synchronized clock`, 'signature-clock-skew');
    }

    const identity = await this.d.identities.get(accessKeyId);
    if (!identity) throw fail(`unknown access key id ${JSON.stringify(accessKeyId.slice(0, 32))}: no active factory service holds it`, 'signature-unknown-key', 'unknown-identifier');

    const presented = SIGNATURE.test(signature) ? Buffer.from(signature, 'hex') : Buffer.alloc(0);
    const input = { method: req.method, target: req.target, host: req.host, accessKeyId, timestamp, body: req.body };
    // during a rotation both the old and the new secret verify; every candidate is computed
    const secrets = [identity.secret_sealed, identity.pending_secret_sealed].filter((s): s is Buffer => s !== null);
    let matched = false;
    for (const sealed of secrets) {
      if (safeEqual(Buffer.from(sign(this.d.sealer.open(sealed), input), 'hex'), presented)) matched = true;
    }
    if (!matched) {
      throw fail('signature does not match: the canonical request (method, path, query, host, X-SVC-* headers, body bytes) signed with the secret of this access key gives another signature', 'signature-mismatch', 'wrong-secret');
    }

    const fresh = await this.d.replays.remember(sha256(signature), new Date(signedAt + MAX_SKEW_MS));
    if (!fresh) throw fail('replayed request: this signature was already used; sign every request anew', 'signature-replayed');

    return {
      via: 'factory-service',
      sub: `factory-service:${identity.id}`,
      realm: FACTORY_SERVICE_ROLE,
      realmKind: 'service',
      accountId: identity.account_id,
      roles: [FACTORY_SERVICE_ROLE],
      factoryService: {
        id: identity.id, accessKeyId: identity.access_key_id, role: identity.role, modelId: identity.model_id, registrarId: identity.registrar_id,
        allow: effectivePolicy(identity.role, identity.policy_allow), policy: identity.policy_allow === null ? 'default' : 'custom',
      },
    };
  }
}

const canonicalName = (h: string) => h.replace(/(^|-)([a-z])/g, (_m, d: string, c: string) => d + c.toUpperCase()).replace('Svc', 'SVC');
