import { Counter, type Registry } from 'prom-client';
import { z } from 'zod';
import type { DeviceMessage, DeviceMessaging, Gateway } from '../gateway.js';
import { furtherThan } from '../../machines/otaAction.js';
import { otaRepo, type Delivery, type Report, type ReportedStatus } from './repo.js';
import type { Rollouts } from './rollouts.js';

/** what a device publishes on `devices/{id}/ota/status` (the action id may instead come as MQTT 5 correlation data) */
export const statusReport = z.object({
  action_id: z.uuid().optional(),
  status: z.enum(['received', 'downloading', 'installing', 'succeeded', 'failed']),
  progress: z.number().int().min(0).max(100).optional(),
  reason: z.string().max(500).refine((s) => !s.includes('\0'), 'no NUL characters').optional(),
});

/** publishes in flight during a fan-out */
const PUBLISH_CONCURRENCY = 64;
/** actions re-sent per sweep */
const RESEND_BATCH = 2000;
/** a pending action not taken up for this long is published again by the sweep */
export const RESEND_PENDING_AFTER_MS = 60_000;
/** an action a device took up but has not reported on for this long is published again (the device answers where it stands) */
export const RESEND_STARTED_AFTER_MS = 10 * 60_000;
/** Runs a statement again after a deadlock or serialization failure (another node's bulk update of the same rows). */
async function retried<T>(run: () => Promise<T>, attempts = 3): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await run();
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (i >= attempts || (code !== '40P01' && code !== '40001')) throw err;
    }
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * OTA over MQTT, outbound: update actions go out on `devices/{id}/ota/update` (correlation data =
 * action id) when a group starts, when the rollout resumes (`fanout`), when the device subscribes,
 * and from the resend sweep.
 */
export class OtaSender {
  constructor(private readonly gw: Gateway, private readonly messaging: DeviceMessaging) {
    messaging.onSubscribed('otaUpdate', (thingId) => {
      void this.deliverOpen(thingId).catch((err) => gw.log.error({ err, thingId }, 'OTA actions not delivered'));
    });
  }

  /** Publishes the pending actions of these groups (after the commit that started or resumed them). */
  async fanout(groupIds: string[]): Promise<void> {
    for (const id of groupIds) await this.send(await otaRepo.pendingOfGroup(this.gw.sql, id));
  }

  /** Re-sends open actions neither sent nor changed for a while (a publish lost with a crash, a device that missed it, a lost report). */
  async resend(): Promise<number> {
    const now = this.gw.clock.now().getTime();
    const due = await otaRepo.unsent(this.gw.sql, { pending: new Date(now - RESEND_PENDING_AFTER_MS), started: new Date(now - RESEND_STARTED_AFTER_MS) }, RESEND_BATCH);
    await this.send(due);
    return due.length;
  }

  private async deliverOpen(thingId: string): Promise<void> {
    await this.send(await otaRepo.openForThing(this.gw.sql, thingId));
  }

  private async send(deliveries: Delivery[]): Promise<void> {
    if (deliveries.length === 0) return;
    const sent: string[] = [];
    let next = 0;
    const worker = async () => {
      while (next < deliveries.length) {
        const d = deliveries[next++];
        const payload = JSON.stringify({ rollout_id: d.rollout_id, action_id: d.id, version: d.version, url: d.artifact_url, sha256: d.sha256, size: Number(d.size) });
        await this.messaging.publish(d.thing_id, 'otaUpdate', payload, { correlationData: Buffer.from(d.id), responseTopic: 'otaStatus' });
        sent.push(d.id);
      }
    };
    try {
      await Promise.all(Array.from({ length: Math.min(PUBLISH_CONCURRENCY, deliveries.length) }, worker));
    } finally {
      // only the resend sweep reads sent_at: a failure here costs a resend at most
      await retried(() => otaRepo.markSent(this.gw.sql, sent, this.gw.clock.now())).catch((err) => this.gw.log.warn({ err }, 'OTA sent times not stored'));
    }
  }
}

/**
 * OTA over MQTT, inbound: the device's reports on `devices/{id}/ota/status` are written in bulk
 * (one statement per batch) and the groups they end are evaluated. A report that does not parse,
 * or names an action that is not the device's, is counted and dropped alone.
 */
export class OtaReports {
  private buffer = new Map<string, Report>();
  private flushing?: Promise<void>;
  private readonly dirty = new Set<string>();
  private evaluating?: Promise<void>;
  private readonly reports: Counter<'result'>;

  constructor(private readonly gw: Gateway, messaging: DeviceMessaging, private readonly rollouts: Rollouts, metrics: Registry) {
    this.reports = new Counter({ name: 'ota_status_reports_total', help: 'OTA status reports from devices by result (applied: taken into a batch; rejected: malformed or without an action id; lost: the batch could not be written)', labelNames: ['result'], registers: [metrics] });
    messaging.onMessage('otaStatus', (m) => this.onStatus(m));
  }

  /** Waits for the buffered reports and their evaluations (shutdown, tests). */
  async drain(): Promise<void> {
    while (this.flushing || this.evaluating || this.buffer.size) {
      if (!this.flushing && this.buffer.size) this.scheduleFlush();
      await Promise.all([this.flushing, this.evaluating]);
    }
  }

  private onStatus(m: DeviceMessage): void {
    let body: unknown;
    try {
      body = JSON.parse(m.payload.toString('utf8'));
    } catch {
      body = undefined;
    }
    const parsed = statusReport.safeParse(body);
    const correlation = m.correlationData?.toString('utf8');
    const actionId = correlation && UUID.test(correlation) ? correlation : parsed.success ? parsed.data.action_id : undefined;
    if (!parsed.success || !actionId || !UUID.test(m.thingId)) {
      this.reports.inc({ result: 'rejected' });
      return;
    }
    this.reports.inc({ result: 'applied' });
    const r = parsed.data;
    const status: ReportedStatus = r.status === 'received' ? 'delivered' : r.status;
    const previous = this.buffer.get(actionId);
    // one report per action and batch: the furthest status, with the newest progress
    if (previous && (previous.thingId !== m.thingId || !furtherThan(status, previous.status))) return;
    this.buffer.set(actionId, { actionId, thingId: m.thingId, status, progress: r.progress ?? previous?.progress ?? null, reason: r.reason ?? null });
    this.scheduleFlush();
  }

  private scheduleFlush(): void {
    if (this.flushing) return;
    this.flushing = (async () => {
      // let the reports arriving together join one write
      await new Promise((resolve) => setImmediate(resolve));
      while (this.buffer.size) {
        const batch = [...this.buffer.values()];
        this.buffer = new Map();
        try {
          const changed = await retried(() => otaRepo.applyReports(this.gw.sql, batch, this.gw.clock.now()));
          for (const c of changed) if (c.ended) this.dirty.add(c.groupId);
        } catch (err) {
          // the devices' actions stay open: the resend sweep sends them again and they report again
          this.reports.inc({ result: 'lost' }, batch.length);
          this.gw.log.error({ err, reports: batch.length }, 'OTA status reports not stored');
        }
        this.evaluateDirty();
      }
    })().finally(() => {
      this.flushing = undefined;
      if (this.buffer.size) this.scheduleFlush();
    });
  }

  /** Evaluates the groups whose actions ended, one at a time (a group marked again meanwhile is evaluated again). */
  private evaluateDirty(): void {
    if (this.evaluating || this.dirty.size === 0) return;
    this.evaluating = (async () => {
      while (this.dirty.size) {
        const [groupId] = this.dirty;
        this.dirty.delete(groupId);
        await this.rollouts.evaluate(groupId).catch((err) => this.gw.log.error({ err, groupId }, 'OTA group not evaluated (the sweep retries)'));
      }
    })().finally(() => {
      this.evaluating = undefined;
      this.evaluateDirty();
    });
  }
}
