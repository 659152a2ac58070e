/**
 * Domain errors: what core code (services, the actor store, repos) throws when a request cannot be
 * served. They say what went wrong in domain terms; `src/http/errors.ts` alone maps each kind to an
 * HTTP status and renders application/problem+json. Nothing here knows about HTTP.
 */
export type ErrorKind =
  | 'invalid' // the input is wrong (400)
  | 'unauthenticated' // the caller's credentials are missing or wrong (401)
  | 'refused' // the caller may not do this (403)
  | 'not_found' // no such resource, or not visible to the caller (404)
  | 'conflict' // the resource's state does not allow it (409)
  | 'gone' // the resource existed and is no longer usable (410)
  | 'unprocessable' // well-formed but not acceptable (422)
  | 'too_many' // the caller must slow down (429)
  | 'upstream' // a service we depend on failed (502)
  | 'unavailable' // not ready or shutting down (503)
  | 'timeout' // a device or service did not answer in time (504)
  | 'internal'; // a fault of ours (500)

/**
 * A refused credential that may be someone guessing: the authentication-failure limits
 * (src/http/authFailures.ts) count it, and only it. Set where the refusal is thrown, never
 * inferred from a status: a cap reached, a revoked or expired credential, a malformed one, a bad
 * bearer signature or a role refusal carry no guess and are never counted.
 */
export interface Guess {
  /** how the credential was presented: tells the limits where its identifier is */
  scheme: 'svc' | 'svc-hmac' | 'internal' | 'enrollment-token' | 'claim-secret' | 'symmetric-key';
  /** unknown-identifier: nothing is known by that name; wrong-secret: the name is known, the secret is not its own */
  kind: 'unknown-identifier' | 'wrong-secret';
}

export interface ErrorOptions {
  /** spec error code (THM-60110, ...) */
  code?: string;
  title?: string;
  /** slug of the problem `type` */
  type?: string;
  /** extra members of the problem body */
  extra?: Record<string, unknown>;
  /** for `too_many` and `unavailable`: when to try again */
  retryAfterSeconds?: number;
  /** a refused credential guess (counted by the authentication-failure limits) */
  guess?: Guess;
}

export class DomainError extends Error {
  constructor(readonly kind: ErrorKind, readonly detail: string, readonly options: ErrorOptions = {}) {
    super(detail);
    this.name = 'DomainError';
  }
}

const factory = (kind: ErrorKind) => (detail: string, options?: ErrorOptions) => new DomainError(kind, detail, options);

export const invalid = factory('invalid');
export const unauthenticated = factory('unauthenticated');
export const refused = factory('refused');
export const notFound = factory('not_found');
export const conflict = factory('conflict');
export const gone = factory('gone');
export const unprocessable = factory('unprocessable');
export const tooMany = factory('too_many');
export const upstreamFailed = factory('upstream');
export const unavailable = factory('unavailable');
export const timedOut = factory('timeout');
export const internal = factory('internal');
