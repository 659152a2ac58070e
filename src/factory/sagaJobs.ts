import crypto from 'node:crypto';
import type { Db } from '../db/client.js';
import type { Jobs } from '../jobs.js';
import type { LegName, SagaStep } from '../../machines/provisioningRun.js';

/**
 * The PROVISION saga's one job kind: a step of one run, due when the run's machine says
 * (`nextStep`). Named when it only dispatched legs, so jobs queued by earlier versions still run.
 */
export const SAGA_JOB = 'factory.provision-leg';

export type StepJob =
  | { runId: string; step: 'DISPATCH' | 'TIMEOUT'; leg: LegName; attempt: number }
  | { runId: string; step: 'END' }
  /** a start whose run never committed: the thing goes back to ROLLEDOFF */
  | { runId: string; step: 'UNDO_START'; thingId: string };

/** What a queued job may hold: a step, or (earlier versions) a leg attempt to dispatch. */
export type QueuedJob = StepJob | { runId: string; leg: LegName; attempt: number };

export const asStep = (job: QueuedJob): StepJob => ('step' in job ? job : { ...job, step: 'DISPATCH' });

export function jobOf(runId: string, s: SagaStep): StepJob {
  return s.step === 'END' ? { runId, step: 'END' } : { runId, step: s.step, leg: s.leg, attempt: s.attempt };
}

/** A step's identity: its run, its kind and, for a leg, the leg and the attempt. */
export function stepKey(job: StepJob): string {
  return job.step === 'DISPATCH' || job.step === 'TIMEOUT' ? `${job.runId}:${job.step}:${job.leg}:${job.attempt}` : `${job.runId}:${job.step}`;
}

/** The pg-boss id of a step's job, derived from the step: queued twice, it is inserted once (`on conflict do nothing`). */
function jobId(job: StepJob): string {
  const h = crypto.hash('sha256', stepKey(job), 'hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** pg-boss on our connection or transaction (it shares the gateway's database). */
function bossDb(db: Db) {
  return {
    async executeSql(text: string, values: unknown[] = []) {
      return { rows: await db.unsafe(text, values as never[]) };
    },
  };
}

/**
 * Queues a step's job in `db` (the transaction of the change that made the step due: the job is
 * queued if and only if that change commits), to start `delaySeconds` from now.
 */
export async function queueStep(jobs: Pick<Jobs, 'boss'>, db: Db, job: StepJob, delaySeconds: number): Promise<void> {
  await jobs.boss.send(SAGA_JOB, job, { id: jobId(job), singletonKey: stepKey(job), startAfter: delaySeconds, db: bossDb(db) } as never);
}

/** Cancels a step's job that is no longer needed (in `db`'s transaction). */
export async function cancelStep(jobs: Pick<Jobs, 'boss'>, db: Db, job: StepJob): Promise<void> {
  await jobs.boss.cancel(SAGA_JOB, jobId(job), { db: bossDb(db) } as never);
}
