import { createLocalJWKSet, errors as joseErrors, type JSONWebKeySet, type JWSHeaderParameters, type FlattenedJWSInput } from 'jose';

export interface JwksOptions {
  /** keys older than this are fetched again before use (jose's default: 10 min) */
  cacheMaxAgeMs?: number;
  /** an unknown `kid` fetches again only when the keys are older than this (jose's default: 30 s) */
  cooldownMs?: number;
  /** fetch timeout */
  timeoutMs?: number;
}

/**
 * One issuer's JWKS, fetched over HTTP: jose's remote key set policy (fetch when missing or older
 * than `cacheMaxAgeMs`; fetch again for an unknown `kid` unless fetched within `cooldownMs`), plus
 * a `generation` that grows whenever a fetch brings keys different from the ones held, and a
 * callback then (the token cache drops the issuer's entries).
 */
export class IssuerJwks {
  private local: ReturnType<typeof createLocalJWKSet> | undefined;
  private keysText: string | undefined;
  private fetchedAtMs = Number.NEGATIVE_INFINITY;
  private pending: Promise<void> | undefined;
  private gen = 0;
  private readonly cacheMaxAgeMs: number;
  private readonly cooldownMs: number;
  private readonly timeoutMs: number;

  constructor(
    readonly url: string,
    private readonly now: () => number,
    private readonly onRotate: () => void,
    options: JwksOptions = {},
  ) {
    this.cacheMaxAgeMs = options.cacheMaxAgeMs ?? 600_000;
    this.cooldownMs = options.cooldownMs ?? 30_000;
    this.timeoutMs = options.timeoutMs ?? 5_000;
  }

  /** The key generation, or undefined when the keys must be fetched (again) before they are trusted. */
  generation(): number | undefined {
    return this.local && this.now() < this.fetchedAtMs + this.cacheMaxAgeMs ? this.gen : undefined;
  }

  /** jose's key resolver (`jwtVerify(token, jwks.key)`). */
  readonly key = async (header: JWSHeaderParameters, token: FlattenedJWSInput) => {
    if (this.generation() === undefined) await this.reload();
    try {
      return await this.local!(header, token);
    } catch (err) {
      if (err instanceof joseErrors.JWKSNoMatchingKey && this.now() >= this.fetchedAtMs + this.cooldownMs) {
        await this.reload();
        return this.local!(header, token);
      }
      throw err;
    }
  };

  private reload(): Promise<void> {
    this.pending ??= this.fetch().finally(() => (this.pending = undefined));
    return this.pending;
  }

  private async fetch(): Promise<void> {
    let response: Response;
    try {
      response = await fetch(this.url, { redirect: 'manual', headers: { accept: 'application/json, application/jwk-set+json' }, signal: AbortSignal.timeout(this.timeoutMs) });
    } catch (err) {
      if ((err as Error).name === 'TimeoutError') throw new joseErrors.JWKSTimeout();
      throw new joseErrors.JOSEError(`JWKS fetch from ${this.url} failed: ${(err as Error).message}`);
    }
    if (response.status !== 200) throw new joseErrors.JOSEError(`Expected 200 OK from the JSON Web Key Set HTTP response, got ${response.status}`);
    let json: JSONWebKeySet;
    try {
      json = (await response.json()) as JSONWebKeySet;
    } catch {
      throw new joseErrors.JOSEError('Failed to parse the JSON Web Key Set HTTP response as JSON');
    }
    const local = createLocalJWKSet(json); // throws JWKSInvalid on a malformed set
    const text = JSON.stringify(json.keys);
    const rotated = this.keysText !== undefined && text !== this.keysText;
    this.local = local;
    this.keysText = text;
    this.fetchedAtMs = this.now();
    if (rotated) {
      this.gen++;
      this.onRotate();
    }
  }
}
