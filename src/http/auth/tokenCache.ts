import crypto from 'node:crypto';
import type { Principal } from './principal.js';

/** One verified bearer token: what its signature and claims proved, and until when that holds. */
interface Entry {
  principal: Principal;
  /** the token's `exp` in ms: the entry is never served at or after it */
  expiresAtMs: number;
  /** the `iss` whose keys verified it */
  issuer: string;
  /** that issuer's key generation at verification: a later one (rotation) makes the entry void */
  generation: number;
}

/**
 * A bounded cache of verified bearer tokens, so a token's ES256/RS256 signature is checked once
 * instead of on every request (issue 36 item 3).
 *
 * - Keyed by the SHA-256 of the token; the token itself is never kept.
 * - An entry holds what verification alone decides (signature, `iss`, `aud`, `exp`, `sub`, the
 *   claims): never the account's capability, the idc assignment, the roles recorded for keys, nor
 *   anything else a resolver or authorization layer reads; those run on every request.
 * - Valid until the token's `exp` and never beyond (the uncached path would still allow the 60 s
 *   clock skew: after `exp` the token is verified again, and refused past the skew).
 * - Void when its issuer's keys changed since it was verified (`generation`), and removed at once
 *   when the verifier sees the change (`dropIssuer`).
 * - At most `capacity` entries, least recently used first out.
 *
 * Each process keeps its own: an entry depends only on the token, the clock and the issuer's public
 * keys, which every node reads from the same place, so nodes never disagree about a token for
 * longer than their JWKS refreshes already allow; nothing a tenant can change is in it.
 */
export class TokenCache {
  private readonly entries = new Map<string, Entry>();

  constructor(readonly capacity = 10_000) {
    if (!(capacity >= 0)) throw new Error(`token cache capacity must be >= 0, got ${capacity}`);
  }

  /** The cache key of a token: its SHA-256 (base64url), never the token. */
  static keyOf(token: string): string {
    return crypto.hash('sha256', token, 'base64url');
  }

  get size(): number {
    return this.entries.size;
  }

  /**
   * The principal of a still-valid entry (a copy), else undefined. `generationOf` answers the
   * issuer's current key generation, or undefined when its keys must be fetched again first.
   */
  get(key: string, nowMs: number, generationOf: (issuer: string) => number | undefined): Principal | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (nowMs >= entry.expiresAtMs || generationOf(entry.issuer) !== entry.generation) {
      this.entries.delete(key);
      return undefined;
    }
    // least recently used goes first: move to the end
    this.entries.delete(key);
    this.entries.set(key, entry);
    return { ...entry.principal };
  }

  set(key: string, entry: Entry, nowMs: number): void {
    if (this.capacity === 0 || nowMs >= entry.expiresAtMs) return;
    this.entries.delete(key);
    while (this.entries.size >= this.capacity) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, entry);
  }

  /** Drops every entry an issuer's keys verified (they rotated). */
  dropIssuer(issuer: string): number {
    let dropped = 0;
    for (const [key, entry] of this.entries) {
      if (entry.issuer === issuer) {
        this.entries.delete(key);
        dropped++;
      }
    }
    return dropped;
  }

  clear(): void {
    this.entries.clear();
  }
}
