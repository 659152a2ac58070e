import crypto from 'node:crypto';
import type { ActorKind, ActorStore } from '../actors/store.js';
import type { Db, Sql } from '../db/client.js';
import type { Jobs } from '../jobs.js';
import type { Logger } from '../log.js';
import { isoNow, type Clock } from '../lib/clock.js';
import { conflict, notFound, refused } from '../lib/errors.js';
import { iso } from '../lib/encoding.js';
import type { FaultHook } from '../lib/faults.js';
import type { Sealer } from '../pki/sealer.js';
import { isUuid } from '../http/auth/principal.js';
import type { Services } from '../gateway.js';
import { nextStep, provisioningRunMachine, type Leg, type LegName, type ProvisioningRunContext, type ProvisioningRunEvent, type SagaStep } from '../../machines/provisioningRun.js';
import { BackendCallError, type FactoryBackends } from './backend.js';
import { asStep, cancelStep, jobOf, queueStep, SAGA_JOB, stepKey, type QueuedJob, type StepJob } from './sagaJobs.js';
import * as runs from './runsRepo.js';

export const provisioningRunKind: ActorKind<typeof provisioningRunMachine> = {
  type: 'provisioningRun',
  machine: provisioningRunMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'provisioning_runs',
    columns: ['state', 'error', 'finished_at'],
    // ENDING (the thing is being moved) still shows as RUNNING: the run is finished once the thing moved
    project: (s, state) => ({ state: state === 'ENDING' ? 'RUNNING' : state, error: s.context.error, finished_at: s.context.finishedAt }),
  },
};

/** The trust domain's thing lifecycle: the saga asks it for the thing's steps (each in trust's own transaction). */
type Lifecycle = Pick<Services['thingLifecycle'], 'provisioningStep' | 'factoryEligibility' | 'state'>;
/** Whose things a caller sees (a factory service: its model's only). */
export type ThingScope = Parameters<Services['thingLifecycle']['state']>[0];

/**
 * A step a request began (a start, the thing's move at the end) is finished by its job when the
 * request has not finished it within the leg timeout, kept between these bounds.
 */
const REQUEST_GRACE_SECONDS = { min: 5, max: 60 };
const CALL_TIMEOUT_MS = 10_000;

export interface SagaSettings { attempts: number; retrySeconds: number; timeoutSeconds: number }

export interface RunView {
  id: string;
  thing_id: string;
  model_id: string;
  state: 'RUNNING' | 'SUCCEEDED' | 'FAILED';
  started_at: string;
  started_by: string;
  finished_at: string | null;
  error: string | null;
  legs: Leg[];
}

export interface LegReport {
  run_id?: string;
  leg: LegName;
  outcome: 'SUCCEEDED' | 'FAILED';
  attempt?: number;
  detail?: string;
  retryable?: boolean;
  result?: Record<string, unknown>;
}

/** Who calls: the thing scope, who they are, and the factory service when signed. */
export interface SagaCaller { scope: ThingScope; sub: string; factoryServiceId?: string }

type Refusal = { refused: true; state: string; context: ProvisioningRunContext };

/**
 * The PROVISION saga (spec: POST /api/v1/things/{id}/provision replies 202; the factory backend
 * reports each leg through POST .../provisioning-result). The provisioningRun machine decides
 * every step and when the next one is due (`nextStep`); each step is one transaction, which also
 * queues the job of the step it made due (pg-boss shares the database): one job kind carries out
 * every step nobody's request drives (dispatch a leg, time an attempt out, move the thing at the
 * end). The thing's steps are asked of the trust domain's service, in trust's own transactions.
 */
export class ProvisioningSaga {
  constructor(private readonly d: {
    sql: Sql; actors: ActorStore; clock: Clock; jobs: Pick<Jobs, 'boss' | 'wake'>; log: Logger; faults: FaultHook; sealer: Sealer;
    backends: FactoryBackends; lifecycle: Lifecycle;
    settings: SagaSettings; publicBaseUrl: string;
  }) {}

  private get grace(): number {
    return Math.max(REQUEST_GRACE_SECONDS.min, Math.min(REQUEST_GRACE_SECONDS.max, this.d.settings.timeoutSeconds));
  }

  /**
   * ROLLEDOFF -> PROVISIONED (trust) and a new run (its first leg queued). The model's services
   * are checked before the thing moves; a start that dies after the thing moved but before its
   * run committed is undone by its UNDO_START job, which the run's transaction cancels.
   */
  async start(caller: SagaCaller, thingId: string): Promise<RunView> {
    const id = crypto.randomUUID();
    const { model_id: modelId } = await this.d.lifecycle.factoryEligibility(caller.scope, thingId); // 404 outside the caller's things
    // an unregistered model (no id) has no services: trust refuses its PROVISION below
    const legs = modelId ? await this.legsOf(modelId) : [];
    const undo: StepJob = { runId: id, step: 'UNDO_START', thingId };
    await queueStep(this.d.jobs, this.d.sql, undo, this.grace);
    const thing = await this.d.lifecycle.provisioningStep({ step: 'PROVISION', scope: caller.scope, thingId }).then(({ thing: t }) => t!, async (err) => {
      await cancelStep(this.d.jobs, this.d.sql, undo); // refused: nothing to undo
      throw err;
    });
    await this.d.faults('provision.thing-provisioned');
    const at = isoNow(this.d.clock);
    let dueNow: boolean;
    try {
      dueNow = await this.d.actors.run(async (uow) => {
        await runs.insert(uow.sql, { id, accountId: caller.scope.accountId, thingId, modelId: thing.modelId, startedBy: caller.sub, createdAt: at });
        const created = await uow.create(provisioningRunKind, id, {
          id, accountId: caller.scope.accountId, thingId, legs, at, by: caller.sub,
          thing: { model: thing.model, modelId: thing.modelId, manufacturer: thing.manufacturer, serial: thing.serial },
          maxAttempts: this.d.settings.attempts, retrySeconds: this.d.settings.retrySeconds, timeoutSeconds: this.d.settings.timeoutSeconds,
        });
        await cancelStep(this.d.jobs, uow.sql, undo);
        return this.queueNext(uow.sql, created.snapshot.context);
      });
    } catch (err) {
      // no run: the thing goes back now (if that fails too, the undo job does it)
      await this.d.lifecycle.provisioningStep({ step: 'PROVISION_FAILED', thingId })
        .then(() => cancelStep(this.d.jobs, this.d.sql, undo))
        .catch((e: Error) => this.d.log.warn({ runId: id, thingId, error: e.message }, 'a start without its run is left to its undo job'));
      if ((err as { code?: string }).code === '23505') throw conflict(`the previous PROVISION saga of thing ${thingId} is still finishing; try again`);
      throw err;
    }
    if (dueNow) this.d.jobs.wake(SAGA_JOB);
    this.d.log.info({ runId: id, thingId, by: caller.sub }, 'PROVISION saga started');
    return this.get(caller.scope, id);
  }

  /** The legs of a run of the model: identify when it has an ACTIVE identify-role service, then provision (409 without one). */
  private async legsOf(modelId: string): Promise<{ name: LegName; factoryServiceId: string }[]> {
    const services = await runs.activeServicesOfModel(this.d.sql, modelId);
    const provision = services.find((s) => s.role === 'provision');
    if (!provision) throw conflict(`model ${modelId} has no active provision-role factory service: register one (POST /api/v1/factory-services) before provisioning`);
    const identify = services.find((s) => s.role === 'identify');
    return [...(identify ? [{ name: 'identify' as const, factoryServiceId: identify.id }] : []), { name: 'provision' as const, factoryServiceId: provision.id }];
  }

  /** The saga's job: the step it names, if the run's machine still says it is the next one (else done meanwhile, or a duplicate). */
  async runStep(queued: QueuedJob): Promise<void> {
    const job = asStep(queued);
    if (job.step === 'UNDO_START') return this.undoStart(job.runId, job.thingId);
    const run = await this.d.actors.get(provisioningRunKind, job.runId);
    const next = run && nextStep(run.snapshot.context);
    if (!run || !next || stepKey(jobOf(job.runId, next)) !== stepKey(job)) return;
    const at = isoNow(this.d.clock);
    if (next.step === 'DISPATCH') await this.dispatch(run.snapshot.context, next);
    else if (next.step === 'TIMEOUT') await this.settle({ type: 'TIMEOUT', leg: next.leg, attempt: next.attempt, at }, job.runId);
    else await this.end(job.runId);
  }

  /** One leg attempt: may the thing go on (trust), DISPATCH (committed with the attempt's timeout job), then the call to the backend. */
  private async dispatch(run: ProvisioningRunContext, step: Extract<SagaStep, { step: 'DISPATCH' }>): Promise<void> {
    const { blocked } = await this.d.lifecycle.provisioningStep({ step: 'CHECK', thingId: run.thingId });
    if (blocked) {
      await this.settle({ type: 'ABORT', at: isoNow(this.d.clock), reason: blocked }, run.id);
      return;
    }
    const { leg: name, attempt } = step;
    const dispatched = await this.d.actors.run(async (uow) => {
      const sent = await uow.trySend(provisioningRunKind, run.id, { type: 'DISPATCH', leg: name, attempt, at: isoNow(this.d.clock) });
      if ('refused' in sent) return undefined; // the machine has moved on
      const leg = sent.snapshot.context.legs.find((l) => l.name === name)!;
      const service = await runs.signingOf(uow.sql, leg.factory_service_id);
      if (service) await runs.addLegRef(uow.sql, service.id, legRef(run.id, name));
      await this.queueNext(uow.sql, sent.snapshot.context);
      return { context: sent.snapshot.context, service };
    });
    if (!dispatched) return;
    await this.d.faults('provision.leg-dispatched');
    const { context, service } = dispatched;
    if (!service || service.state !== 'ACTIVE') {
      await this.settle({ type: 'ATTEMPT_FAILED', leg: name, attempt, at: isoNow(this.d.clock), error: `factory service ${service?.id ?? '(gone)'} is no longer active`, permanent: true }, run.id);
      return;
    }
    try {
      await this.d.backends.dispatchLeg({
        endpointUrl: service.endpoint_url,
        creds: { accessKeyId: service.access_key_id, secretAccessKey: this.d.sealer.open(service.secret_sealed) },
        at: this.d.clock.now(),
        timeoutMs: CALL_TIMEOUT_MS,
        body: {
          run_id: run.id, thing_id: context.thingId, leg: name, attempt,
          model_id: context.thing.modelId, model: context.thing.model, manufacturer: context.thing.manufacturer, serial: context.thing.serial,
          result_url: `${this.d.publicBaseUrl}/api/v1/things/${context.thingId}/provisioning-result`,
        },
      });
      this.d.log.info({ runId: run.id, leg: name, attempt }, 'saga leg dispatched');
    } catch (err) {
      const permanent = err instanceof BackendCallError && err.permanent;
      this.d.log.warn({ runId: run.id, leg: name, attempt, error: (err as Error).message, permanent }, 'saga leg call failed');
      await this.settle({ type: 'ATTEMPT_FAILED', leg: name, attempt, at: isoNow(this.d.clock), error: (err as Error).message, permanent }, run.id);
    }
  }

  /**
   * POST /api/v1/things/{id}/provisioning-result: the backend reports a leg. 404 for a thing or
   * run the caller cannot see; 403 when a factory service reports another service's leg; 409 when
   * the leg is finished, not dispatched yet, or the report is of an older attempt.
   */
  async report(caller: SagaCaller, thingId: string, body: LegReport): Promise<RunView> {
    await this.d.lifecycle.state(caller.scope, thingId); // 404 outside the caller's things
    const runId = body.run_id ?? (await runs.runningOf(this.d.sql, thingId));
    const row = runId && isUuid(runId) ? await runs.find(this.d.sql, caller.scope.accountId, runId) : undefined;
    if (!runId || !row || row.thing_id !== thingId) {
      throw notFound(body.run_id ? `provisioning run ${body.run_id} of thing ${thingId} not found` : `thing ${thingId} has no running PROVISION saga`);
    }
    const refusal = await this.settle({
      type: 'RESULT', leg: body.leg, outcome: body.outcome, at: isoNow(this.d.clock), detail: body.detail, retryable: body.retryable, result: body.result, attempt: body.attempt,
    }, runId, (context) => {
      const leg = context.legs.find((l) => l.name === body.leg);
      if (!leg) throw notFound(`provisioning run ${runId} has no ${body.leg} leg`);
      if (caller.factoryServiceId && caller.factoryServiceId !== leg.factory_service_id) {
        throw refused(`the ${body.leg} leg is reported by factory service ${leg.factory_service_id}, not by ${caller.factoryServiceId}`);
      }
    });
    if (refusal) throw legConflict(runId, body, refusal.context, refusal.state);
    return this.get(caller.scope, runId);
  }

  async list(scope: ThingScope, q: runs.ListFilter): Promise<{ items: RunView[]; next_cursor: string | null }> {
    const rows = await runs.list(this.d.sql, scope, { ...q, limit: q.limit + 1 });
    const items = await Promise.all(rows.slice(0, q.limit).map((r) => this.present(r)));
    return { items, next_cursor: rows.length > q.limit ? items[items.length - 1].id : null };
  }

  async get(scope: ThingScope, id: string): Promise<RunView> {
    const row = isUuid(id) ? await runs.find(this.d.sql, scope.accountId, id, scope.modelId) : undefined;
    if (!row) throw notFound(`provisioning run ${id} not found`);
    return this.present(row);
  }

  /**
   * At start-up: every running run's next step is queued again. Each step's job was queued with
   * the change that made it due; this covers jobs that ran out of pg-boss's redeliveries and runs
   * of earlier versions (whose timeouts were a job kind of their own). Duplicates collapse.
   */
  async recover(): Promise<number> {
    let queued = 0;
    for (let after: string | undefined, ids: string[]; (ids = await runs.running(this.d.sql, after, 500)).length > 0; after = ids[ids.length - 1]) {
      for (const id of ids) {
        const run = await this.d.actors.get(provisioningRunKind, id);
        if (run && (await this.queueNext(this.d.sql, run.snapshot.context))) queued++;
      }
    }
    if (queued > 0) this.d.jobs.wake(SAGA_JOB);
    return queued;
  }

  // --- steps

  /**
   * One saga step in its own transaction: the machine decides; legs that ended release their
   * hold on the factory service; the job of the next step is queued in the same transaction.
   * When the legs ended, the thing moves at once (`end`). `check` runs on the locked run first.
   * Answers the machine's refusal, if it refused.
   */
  private async settle(event: ProvisioningRunEvent, runId: string, check?: (context: ProvisioningRunContext) => void): Promise<Refusal | undefined> {
    const outcome = await this.d.actors.run(async (uow): Promise<Refusal | { state: string; dueNow: boolean }> => {
      const current = await uow.load(provisioningRunKind, runId);
      if (!current) throw notFound(`provisioning run ${runId} not found`);
      check?.(current.snapshot.context);
      const sent = await uow.trySend(provisioningRunKind, runId, event);
      if ('refused' in sent) return { refused: true as const, state: sent.state, context: sent.snapshot.context };
      for (const leg of sent.snapshot.context.legs) {
        if (leg.state !== 'RUNNING') await runs.removeLegRef(uow.sql, leg.factory_service_id, legRef(runId, leg.name));
      }
      return { state: sent.state, dueNow: await this.queueNext(uow.sql, sent.snapshot.context) };
    });
    if ('refused' in outcome) return outcome;
    await this.d.faults('provision.step-committed');
    if (outcome.dueNow) this.d.jobs.wake(SAGA_JOB);
    if (outcome.state === 'ENDING') await this.end(runId);
    return undefined;
  }

  /**
   * The legs ended: the thing moves (trust: IN_FACTORY, or back to ROLLEDOFF; a no-op when it
   * moved on meanwhile), then THING_DONE finishes the run. Run by whoever ended the legs, and by
   * the END job after a grace period if that did not finish it (a crash).
   */
  private async end(runId: string): Promise<void> {
    const run = await this.d.actors.get(provisioningRunKind, runId);
    const next = run && nextStep(run.snapshot.context);
    if (!run || next?.step !== 'END') return;
    const { thingId } = run.snapshot.context;
    await this.d.lifecycle.provisioningStep({ step: next.outcome === 'SUCCEEDED' ? 'FACTORY_DONE' : 'PROVISION_FAILED', thingId });
    await this.d.faults('provision.thing-moved');
    const sent = await this.d.actors.run((uow) => uow.trySend(provisioningRunKind, runId, { type: 'THING_DONE', at: isoNow(this.d.clock) }));
    if ('refused' in sent) return;
    this.d.log.info({ runId, thingId, outcome: sent.state, error: sent.snapshot.context.error }, 'PROVISION saga finished');
  }

  /** UNDO_START: the run never committed (a crash during the start), so the thing goes back to ROLLEDOFF unless another run holds it. */
  private async undoStart(runId: string, thingId: string): Promise<void> {
    if (await runs.exists(this.d.sql, runId)) return;
    if (await runs.runningOf(this.d.sql, thingId)) return;
    await this.d.lifecycle.provisioningStep({ step: 'PROVISION_FAILED', thingId });
    this.d.log.warn({ runId, thingId }, 'PROVISION saga start undone: its run was never created');
  }

  /**
   * Queues, in `db`, the job of the run's next step at the time the machine says (the END job
   * after a grace period: whoever ended the legs moves the thing at once). True when it is due now.
   */
  private async queueNext(db: Db, context: ProvisioningRunContext): Promise<boolean> {
    const next = nextStep(context);
    if (!next) return false;
    const delay = Math.max(0, Math.ceil((Date.parse(next.at) - this.d.clock.now().getTime()) / 1000)) + (next.step === 'END' ? this.grace : 0);
    await queueStep(this.d.jobs, db, jobOf(context.id, next), delay);
    return delay === 0;
  }

  private async present(r: runs.RunRow): Promise<RunView> {
    const run = await this.d.actors.get(provisioningRunKind, r.id);
    return {
      id: r.id, thing_id: r.thing_id, model_id: r.model_id, state: r.state, started_at: iso(r.created_at), started_by: r.started_by,
      finished_at: iso(r.finished_at), error: r.error, legs: run?.snapshot.context.legs ?? [],
    };
  }
}

const legRef = (runId: string, leg: LegName) => `${runId}:${leg}`;

function legConflict(runId: string, body: LegReport, context: ProvisioningRunContext, state: string) {
  const leg = context.legs.find((l) => l.name === body.leg)!;
  const extra = { run_state: state === 'ENDING' ? 'RUNNING' : state, leg_state: leg.state, attempt: leg.attempts };
  if (state === 'ENDING') return conflict(`provisioning run ${runId} is finishing (${context.ending?.outcome}): its legs are finished`, { extra });
  if (state !== 'RUNNING') return conflict(`provisioning run ${runId} is ${state}: its legs are finished`, { extra });
  if (leg.state === 'SUCCEEDED' || leg.state === 'FAILED') return conflict(`the ${body.leg} leg of run ${runId} is finished (${leg.state})`, { extra });
  if (leg.state === 'PENDING') return conflict(`the ${body.leg} leg of run ${runId} is not dispatched (PENDING${leg.due ? `, due ${leg.due}` : ''}); report it after its call`, { extra });
  return conflict(`the report is of attempt ${body.attempt}, but the ${body.leg} leg of run ${runId} is at attempt ${leg.attempts}`, { extra });
}

