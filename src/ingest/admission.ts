import { tooMany, unavailable } from '../lib/errors.js';

/**
 * More than a job's working set while this node receives and stages it, whatever the body's
 * size: one item (at most 64 KiB and its parse), the spool text waiting to be written (256 KiB,
 * twice while it is joined), socket, file and COPY stream buffers (64 KiB each). Every job
 * reserves at least this much of the budget, so the budget bounds the number of jobs, small
 * ones too (docs/decisions.md "Bulk ingest memory (issue 37)").
 */
export const JOB_MIN_RESERVATION_BYTES = 4 * 1024 * 1024;
/** When a refused job may try again: a job of the full 64 MiB is received and staged in seconds. */
export const JOB_RETRY_AFTER_SECONDS = 5;

export interface AdmissionOptions {
  /** jobs of one partner this node receives and stages at once */
  perPartner: number;
  /** bytes of job bodies this node receives and stages at once */
  budgetBytes: number;
}

/**
 * Admission of bulk job requests on this node, before their body is read: at most `perPartner`
 * at once per partner (429 beyond), and at most `budgetBytes` reserved by all of them together
 * (503 beyond). A job reserves its Content-Length (the body limit when it declares none), at
 * least JOB_MIN_RESERVATION_BYTES, at most the whole budget (so one job is always let in on an
 * idle node). Both answers carry Retry-After.
 */
export class JobAdmission {
  private reserved = 0;
  private jobs = 0;
  private readonly byPartner = new Map<string, number>();

  constructor(private readonly o: AdmissionOptions) {}

  /** Reserves room for one job, or throws 429/503: call the returned release once the request is answered. */
  admit(partner: string, bodyBytes: number): () => void {
    const running = this.byPartner.get(partner) ?? 0;
    if (running >= this.o.perPartner) {
      throw tooMany(`your partner already has ${running} bulk jobs being received by this node, the most it takes at once; retry after ${JOB_RETRY_AFTER_SECONDS} s`, {
        type: 'jobs-in-flight', retryAfterSeconds: JOB_RETRY_AFTER_SECONDS,
      });
    }
    const bytes = Math.min(this.o.budgetBytes, Math.max(JOB_MIN_RESERVATION_BYTES, bodyBytes));
    if (this.reserved + bytes > this.o.budgetBytes) {
      throw unavailable(`this node is receiving as many bulk job bytes as it takes at once (${this.o.budgetBytes}); retry after ${JOB_RETRY_AFTER_SECONDS} s`, {
        type: 'ingest-busy', retryAfterSeconds: JOB_RETRY_AFTER_SECONDS,
      });
    }
    this.reserved += bytes;
    this.jobs++;
    this.byPartner.set(partner, running + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.reserved -= bytes;
      this.jobs--;
      const left = (this.byPartner.get(partner) ?? 1) - 1;
      if (left > 0) this.byPartner.set(partner, left);
      else this.byPartner.delete(partner);
    };
  }

  /** What is admitted now (metrics and tests). */
  get inUse(): { jobs: number; bytes: number } {
    return { jobs: this.jobs, bytes: this.reserved };
  }
}

/** At most `n` holders at once; the others wait in order. */
export class Slots {
  private readonly waiting: (() => void)[] = [];

  constructor(private free: number) {}

  /** Waits for a slot: call the returned release once done. */
  async take(): Promise<() => void> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    };
  }
}
