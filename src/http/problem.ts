import type { Guess } from '../lib/errors.js';

/**
 * RFC 9457 problem details. Services throw `Problem`s; the one error handler in http/errors.ts
 * renders them as application/problem+json with `instance` and `trace_id`.
 */
export interface ProblemOptions {
  /** Spec error code (THM-60110, ...) */
  code?: string;
  title?: string;
  /** slug of the `type` URI: `${PUBLIC_BASE_URL}/docs/problems/<slug>` */
  type?: string;
  /** extra members merged into the body */
  extra?: Record<string, unknown>;
  headers?: Record<string, string>;
  /** a refused credential guess (src/lib/errors.ts); never part of the body */
  guess?: Guess;
}

const TITLES: Record<number, string> = {
  400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed',
  406: 'Not Acceptable', 409: 'Conflict', 410: 'Gone', 413: 'Payload Too Large', 415: 'Unsupported Media Type',
  422: 'Unprocessable Content', 429: 'Too Many Requests', 500: 'Internal Server Error', 502: 'Bad Gateway',
  503: 'Service Unavailable', 504: 'Gateway Timeout',
};

export function statusTitle(status: number): string {
  return TITLES[status] ?? (status >= 500 ? 'Server Error' : 'Client Error');
}

export function slugOf(title: string): string {
  return title.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');
}

export class Problem extends Error {
  readonly status: number;
  readonly detail: string;
  readonly options: ProblemOptions;

  constructor(status: number, detail: string, options: ProblemOptions = {}) {
    super(detail);
    this.name = 'Problem';
    this.status = status;
    this.detail = detail;
    this.options = options;
  }

  get title(): string {
    return this.options.title ?? statusTitle(this.status);
  }
}

export const badRequest = (detail: string, o?: ProblemOptions) => new Problem(400, detail, o);
export const unauthorized = (detail: string, o?: ProblemOptions) => new Problem(401, detail, o);
export const forbidden = (detail: string, o?: ProblemOptions) => new Problem(403, detail, o);
export const notFound = (detail: string, o?: ProblemOptions) => new Problem(404, detail, o);
export const conflict = (detail: string, o?: ProblemOptions) => new Problem(409, detail, o);
export const unprocessable = (detail: string, o?: ProblemOptions) => new Problem(422, detail, o);
