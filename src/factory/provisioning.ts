import crypto from 'node:crypto';
import type { SnapshotFrom } from 'xstate';
import type { ActorKind, ActorStore, UnitOfWork } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { Jobs } from '../jobs.js';
import type { Logger } from '../log.js';
import { isoNow, type Clock } from '../lib/clock.js';
import { conflict, notFound, refused } from '../lib/errors.js';
import { iso } from '../lib/encoding.js';
import type { FaultHook } from '../lib/faults.js';
import type { Sealer } from '../pki/sealer.js';
import { isUuid } from '../http/auth/principal.js';
import type { Services } from '../gateway.js';
import { provisioningRunMachine, type Leg, type LegName, type ProvisioningRunContext, type ProvisioningRunEvent } from '../../machines/provisioningRun.js';
import { BackendCallError, type FactoryBackends } from './backend.js';
import * as runs from './runsRepo.js';

export const provisioningRunKind: ActorKind<typeof provisioningRunMachine> = {
  type: 'provisioningRun',
  machine: provisioningRunMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'provisioning_runs',
    columns: ['state', 'error', 'finished_at'],
    project: (s, state) => ({ state, error: s.context.error, finished_at: s.context.finishedAt }),
  },
};

 /** The trust domain's thing lifecycle (its PROVISION steps run inside the saga's transactions). */
type Lifecycle = Pick<Services['thingLifecycle'], 'startProvisioning' | 'provisioningBlocked' | 'provisioningEnded' | 'state'>;
/** Whose things a caller sees (a factory service: its model's only). */
export type ThingScope = Parameters<Services['thingLifecycle']['state']>[0];

export const LEG_JOB = 'factory.provision-leg';
export const LEG_TIMEOUT_JOB = 'factory.provision-leg-timeout';
/** A due leg whose job has not run this long after is re-queued by the sweep (a job lost in a crash). */
const LOST_JOB_SECONDS = 60;
const CALL_TIMEOUT_MS = 10_000;

export interface LegJob { runId: string; leg: LegName; attempt: number }

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

type RunSnapshot = SnapshotFrom<typeof provisioningRunMachine>;

/**
 * The PROVISION saga (spec: POST /api/v1/things/{id}/provision replies 202; the factory backend
 * reports each leg through POST .../provisioning-result). The provisioningRun machine decides
 * every step; each step is one transaction; the legs' calls run as durable jobs (pg-boss), the
 * machine refusing a repeated or stale step makes every job idempotent, and a sweep (every
 * minute and at start-up) re-queues what a crash lost, so a run resumes after a restart.
 */
export class ProvisioningSaga {
  constructor(private readonly d: {
    sql: Sql; actors: ActorStore; clock: Clock; jobs: Pick<Jobs, 'send'>; log: Logger; faults: FaultHook; sealer: Sealer;
    backends: FactoryBackends; lifecycle: Lifecycle;
    settings: SagaSettings; publicBaseUrl: string;
  }) {}

  /** ROLLEDOFF -> PROVISIONED and a new run, in one transaction; its first leg is queued. */
  async start(caller: SagaCaller, thingId: string): Promise<RunView> {
    const id = crypto.randomUUID();
    const at = isoNow(this.d.clock);
    const snapshot = await this.d.actors.run(async (uow) => {
      const thing = await this.d.lifecycle.startProvisioning(uow, caller.scope, thingId);
      const services = await runs.activeServicesOfModel(uow.sql, thing.modelId);
      const provision = services.find((s) => s.role === 'provision');
      if (!provision) throw conflict(`model ${thing.model} has no active provision-role factory service: register one (POST /api/v1/factory-services) before provisioning`);
      const identify = services.find((s) => s.role === 'identify');
      const legs = [...(identify ? [{ name: 'identify' as const, factoryServiceId: identify.id }] : []), { name: 'provision' as const, factoryServiceId: provision.id }];
      await runs.insert(uow.sql, { id, accountId: caller.scope.accountId, thingId, modelId: thing.modelId, startedBy: caller.sub, createdAt: at });
      const created = await uow.create(provisioningRunKind, id, {
        id, accountId: caller.scope.accountId, thingId, legs, at, by: caller.sub,
        thing: { model: thing.model, modelId: thing.modelId, manufacturer: thing.manufacturer, serial: thing.serial },
        maxAttempts: this.d.settings.attempts, retrySeconds: this.d.settings.retrySeconds,
      });
      return created.snapshot;
    });
    this.d.log.info({ runId: id, thingId, by: caller.sub }, 'PROVISION saga started');
    await this.queueDue(snapshot.context);
    return this.get(caller.scope, id);
  }

  /** The job of one leg attempt: DISPATCH (committed first), then the call to the backend. */
  async runLeg(job: LegJob): Promise<void> {
    const at = isoNow(this.d.clock);
    const dispatched = await this.d.actors.run(async (uow) => {
      const run = await uow.load(provisioningRunKind, job.runId);
      if (!run || run.state !== 'RUNNING') return undefined;
      const blocked = await this.d.lifecycle.provisioningBlocked(uow, run.snapshot.context.thingId);
      if (blocked) {
        await this.step(uow, job.runId, { type: 'ABORT', at, reason: blocked });
        return undefined;
      }
      const sent = await uow.trySend(provisioningRunKind, job.runId, { type: 'DISPATCH', leg: job.leg, attempt: job.attempt, at });
      if ('refused' in sent) return undefined; // a repeated or stale job: the machine has moved on
      const leg = sent.snapshot.context.legs.find((l) => l.name === job.leg)!;
      const service = await runs.signingOf(uow.sql, leg.factory_service_id);
      if (service) await runs.addLegRef(uow.sql, service.id, legRef(job.runId, job.leg));
      return { context: sent.snapshot.context, service };
    });
    if (!dispatched) return;
    await this.d.faults('provision.leg-dispatched');
    await this.d.jobs.send(LEG_TIMEOUT_JOB, job, { startAfter: this.d.settings.timeoutSeconds, singletonKey: `${job.runId}:${job.leg}:${job.attempt}` });
    const { context, service } = dispatched;
    if (!service || service.state !== 'ACTIVE') {
      await this.settle({ type: 'ATTEMPT_FAILED', leg: job.leg, attempt: job.attempt, at: isoNow(this.d.clock), error: `factory service ${service?.id ?? '(gone)'} is no longer active`, permanent: true }, job.runId);
      return;
    }
    try {
      await this.d.backends.dispatchLeg({
        endpointUrl: service.endpoint_url,
        creds: { accessKeyId: service.access_key_id, secretAccessKey: this.d.sealer.open(service.secret_sealed) },
        at: this.d.clock.now(),
        timeoutMs: CALL_TIMEOUT_MS,
        body: {
          run_id: job.runId, thing_id: context.thingId, leg: job.leg, attempt: job.attempt,
          model_id: context.thing.modelId, model: context.thing.model, manufacturer: context.thing.manufacturer, serial: context.thing.serial,
          result_url: `${this.d.publicBaseUrl}/api/v1/things/${context.thingId}/provisioning-result`,
        },
      });
      this.d.log.info({ runId: job.runId, leg: job.leg, attempt: job.attempt }, 'saga leg dispatched');
    } catch (err) {
      const permanent = err instanceof BackendCallError && err.permanent;
      this.d.log.warn({ runId: job.runId, leg: job.leg, attempt: job.attempt, error: (err as Error).message, permanent }, 'saga leg call failed');
      await this.settle({ type: 'ATTEMPT_FAILED', leg: job.leg, attempt: job.attempt, at: isoNow(this.d.clock), error: (err as Error).message, permanent }, job.runId);
    }
  }

  /** The timeout job: the attempt still running this long is a failed attempt. */
  async timeout(job: LegJob): Promise<void> {
    await this.settle({ type: 'TIMEOUT', leg: job.leg, attempt: job.attempt, at: isoNow(this.d.clock) }, job.runId);
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
    const outcome = await this.settle({
      type: 'RESULT', leg: body.leg, outcome: body.outcome, at: isoNow(this.d.clock), detail: body.detail, retryable: body.retryable, result: body.result, attempt: body.attempt,
    }, runId, (context) => {
      const leg = context.legs.find((l) => l.name === body.leg);
      if (!leg) throw notFound(`provisioning run ${runId} has no ${body.leg} leg`);
      if (caller.factoryServiceId && caller.factoryServiceId !== leg.factory_service_id) {
        throw refused(`the ${body.leg} leg is reported by factory service ${leg.factory_service_id}, not by ${caller.factoryServiceId}`);
      }
    });
    if ('refused' in outcome) throw legConflict(runId, body, outcome.context, outcome.state);
    return this.get(caller.scope, runId);
  }

  async list(scope: ThingScope, q: runs.ListFilter): Promise<{ items: RunView[]; next_cursor: string | null }> {
    const rows = await runs.list(this.d.sql, scope, { ...q, limit: q.limit + 1 });
    const items = rows.slice(0, q.limit).map(present);
    return { items, next_cursor: rows.length > q.limit ? items[items.length - 1].id : null };
  }

  async get(scope: ThingScope, id: string): Promise<RunView> {
    const row = isUuid(id) ? await runs.find(this.d.sql, scope.accountId, id, scope.modelId) : undefined;
    if (!row) throw notFound(`provisioning run ${id} not found`);
    return present(row);
  }

  /**
   * Scheduled (every minute) and at start-up: due legs whose job a crash lost are queued again,
   * and attempts past their timeout whose timeout job was lost are timed out.
   */
  async sweep(opts: { atStart?: boolean } = {}): Promise<void> {
    const now = this.d.clock.now().getTime();
    // at start-up nothing of this node is in flight: every due leg is queued again (duplicates are refused by the machine)
    const lostAfterMs = opts.atStart ? 0 : LOST_JOB_SECONDS * 1000;
    for (const row of await runs.running(this.d.sql, 500)) {
      const leg = row.legs.find((l) => l.state === 'PENDING' || l.state === 'RUNNING');
      if (!leg) continue;
      if (leg.state === 'PENDING' && leg.due && Date.parse(leg.due) <= now - lostAfterMs) {
        await this.d.jobs.send(LEG_JOB, { runId: row.id, leg: leg.name, attempt: leg.attempts + 1 }, { singletonKey: `${row.id}:${leg.name}:${leg.attempts + 1}` });
      }
      const dispatchedAt = leg.history[leg.history.length - 1]?.dispatched_at;
      if (leg.state === 'RUNNING' && dispatchedAt && Date.parse(dispatchedAt) + this.d.settings.timeoutSeconds * 1000 <= now) {
        await this.timeout({ runId: row.id, leg: leg.name, attempt: leg.attempts });
      }
    }
  }

  // --- steps

  /**
   * One saga step in its own transaction: the machine decides; legs that ended release their
   * hold on the factory service; a finished run moves the thing (IN_FACTORY or back to ROLLEDOFF).
   * After commit the next due leg is queued. `check` runs on the locked run before the event.
   */
  private async settle(event: ProvisioningRunEvent, runId: string, check?: (context: ProvisioningRunContext) => void): Promise<RunSnapshot | { refused: true; state: string; context: ProvisioningRunContext }> {
    const outcome = await this.d.actors.run(async (uow) => {
      const current = await uow.load(provisioningRunKind, runId);
      if (!current) throw notFound(`provisioning run ${runId} not found`);
      check?.(current.snapshot.context);
      const sent = await this.step(uow, runId, event);
      return 'refused' in sent ? { refused: true as const, state: sent.state, context: sent.snapshot.context } : sent.snapshot;
    });
    if ('refused' in outcome) return outcome;
    await this.d.faults('provision.step-committed');
    await this.queueDue(outcome.context);
    return outcome;
  }

  private async step(uow: UnitOfWork, runId: string, event: ProvisioningRunEvent) {
    const sent = await uow.trySend(provisioningRunKind, runId, event);
    if ('refused' in sent) return sent;
    const { context } = sent.snapshot;
    for (const leg of context.legs) {
      if (leg.state !== 'RUNNING') await runs.removeLegRef(uow.sql, leg.factory_service_id, legRef(runId, leg.name));
    }
    if (sent.state !== 'RUNNING') {
      await this.d.lifecycle.provisioningEnded(uow, context.thingId, sent.state as 'SUCCEEDED' | 'FAILED');
      this.d.log.info({ runId, thingId: context.thingId, outcome: sent.state, error: context.error }, 'PROVISION saga finished');
    }
    return sent;
  }

  /** Queues the job of the leg that is due (now or after its backoff). */
  private async queueDue(context: ProvisioningRunContext): Promise<void> {
    const leg = context.legs.find((l) => l.state === 'PENDING' || l.state === 'RUNNING');
    if (!leg || leg.state !== 'PENDING' || !leg.due) return;
    const delay = Math.max(0, Math.ceil((Date.parse(leg.due) - this.d.clock.now().getTime()) / 1000));
    const attempt = leg.attempts + 1;
    await this.d.jobs.send(LEG_JOB, { runId: context.id, leg: leg.name, attempt }, { startAfter: delay, singletonKey: `${context.id}:${leg.name}:${attempt}` });
  }
}

const legRef = (runId: string, leg: LegName) => `${runId}:${leg}`;

function legConflict(runId: string, body: LegReport, context: ProvisioningRunContext, state: string) {
  const leg = context.legs.find((l) => l.name === body.leg)!;
  const extra = { run_state: state, leg_state: leg.state, attempt: leg.attempts };
  if (state !== 'RUNNING') return conflict(`provisioning run ${runId} is ${state}: its legs are finished`, { extra });
  if (leg.state === 'SUCCEEDED' || leg.state === 'FAILED') return conflict(`the ${body.leg} leg of run ${runId} is finished (${leg.state})`, { extra });
  if (leg.state === 'PENDING') return conflict(`the ${body.leg} leg of run ${runId} is not dispatched (PENDING${leg.due ? `, due ${leg.due}` : ''}); report it after its call`, { extra });
  return conflict(`the report is of attempt ${body.attempt}, but the ${body.leg} leg of run ${runId} is at attempt ${leg.attempts}`, { extra });
}

function present(r: runs.RunRow): RunView {
  return {
    id: r.id, thing_id: r.thing_id, model_id: r.model_id, state: r.state, started_at: iso(r.created_at), started_by: r.started_by,
    finished_at: iso(r.finished_at), error: r.error, legs: r.legs,
  };
}
