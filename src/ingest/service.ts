import crypto from 'node:crypto';
import type { ActorKind, ActorStore } from '../actors/store.js';
import type { Db, Sql, Tx } from '../db/client.js';
import type { Jobs } from '../jobs.js';
import type { Logger } from '../log.js';
import type { Clock } from '../lib/clock.js';
import type { FaultHook } from '../lib/faults.js';
import { iso } from '../lib/encoding.js';
import { DomainError, conflict, notFound, refused, unavailable, unprocessable } from '../lib/errors.js';
import { ingestJobMachine } from '../../machines/ingestJob.js';
import * as repo from './repo.js';
import { Slots } from './admission.js';
import { SPOOL_DELIMITER, type IntakeError, type JobUpload } from './jobBody.js';
import { processItems, processItemsIsolated, refusedByDatabase, summarize, type ItemResult } from './pipeline.js';
import type { ResourceName } from './resources.js';
import { BATCH_MAX_ITEMS, type BatchBody } from './schemas.js';

export const ingestJobKind: ActorKind<typeof ingestJobMachine> = {
  type: 'ingestJob',
  machine: ingestJobMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'ingest_jobs',
    columns: ['state', 'started_at', 'completed_at'],
    project: (s, state) => ({ state, started_at: s.context.startedAt, completed_at: s.context.completedAt }),
  },
};

export const RUN_JOB = 'ingest.run-job';
export const SWEEP_JOB = 'ingest.sweep';
/** Items a job processes per transaction (one checkpoint each). */
export const JOB_CHUNK = 5000;
/** Jobs a node stages into the database at once (the others wait, their bodies spooled). */
export const JOB_STAGING_AT_ONCE = 2;
/** Spooled rows staged per statement while a job is created. */
export const STAGE_BLOCK_BYTES = 1024 * 1024;
/** Items the worker reads and processes at once within a chunk, at most JOB_PAGE_BYTES of their JSON (and one more item): its working set. */
export const JOB_PAGE = 1000;
export const JOB_PAGE_BYTES = 1024 * 1024;
export const ERRORS_KEPT_DAYS = 30;
/** How long a correlation_id keeps its first answer. */
export const REQUESTS_KEPT_DAYS = 7;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const CORRELATION_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const WAREHOUSE_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** Who calls: a user of a partner account (bearer token or that user's access key). */
export interface Caller {
  sub: string;
  accountId: string;
}

export interface Answer<T> {
  status: number;
  body: T;
  /** true when this is the stored first answer of an earlier request with the same correlation_id */
  replayed: boolean;
}

type Scope = repo.Scope & { resource: ResourceName };

/** Connection-level failures of the database: the caller should retry later (503), not a bug of ours (500). */
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT', '57P01', '57P02', '57P03', '53300', '55000']);

/** A database-unreachable error as a 503 domain error (with Retry-After); undefined for anything else. */
export function unreachableDatabase(err: unknown): DomainError | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return undefined;
  if (!UNREACHABLE_CODES.has(code) && !code.startsWith('08')) return undefined;
  return unavailable('the ingest store is temporarily unreachable; retry with the same correlation_id', { retryAfterSeconds: 5 });
}

/** Opaque page tokens: which list they belong to and the last sequence number seen. */
function pageToken(list: string, seq: number): string {
  return Buffer.from(JSON.stringify({ l: list, s: seq })).toString('base64url');
}
function readPageToken(token: string | undefined, list: string): number {
  if (token === undefined || token === '') return 0;
  try {
    const t = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as { l?: unknown; s?: unknown };
    if (t.l === list && Number.isSafeInteger(t.s) && (t.s as number) >= 0) return t.s as number;
  } catch {
    // falls through to 404
  }
  throw notFound('page_token not found: it does not belong to this list (use next_page_token as returned)');
}

/** pg-boss on our transaction: the job is queued if and only if the transaction commits. */
function bossDb(tx: Tx) {
  return {
    async executeSql(text: string, values: unknown[] = []) {
      // postgres.js serializes an object parameter of a json column itself
      return { rows: await tx.unsafe(text, values as never[]) };
    },
  };
}

export interface IngestDeps {
  sql: Sql;
  actors: ActorStore;
  clock: Clock;
  jobs: Jobs;
  log: Logger;
  faults: FaultHook;
  baseUrl: string;
  jobMaxItems: number;
}

/**
 * The ingest domain: synchronous batches, bulk jobs, quarantine, warehouses. Services throw
 * domain errors; src/http maps them to the spec's problem documents.
 */
export class IngestService {
  /** false until the domain started on this node and again while it stops: 503 */
  private accepting = false;
  /**
   * Jobs this node stages at once (each a transaction that parses its items' JSON in the
   * database): more would take that many connections of the pool and CPU from the database.
   */
  private readonly staging = new Slots(JOB_STAGING_AT_ONCE);

  constructor(private readonly d: IngestDeps) {}

  setAccepting(on: boolean): void {
    this.accepting = on;
  }

  ensureAvailable(): void {
    if (!this.accepting) throw unavailable('ingest is not accepting requests on this node right now (starting or shutting down)', { retryAfterSeconds: 5 });
  }

  // ---- scoping

  /** 403 unless the warehouse is registered for the caller's account and the caller is scoped to it. */
  async authorizeWarehouse(caller: Caller, warehouseId: string, db: Db = this.d.sql): Promise<repo.WarehouseRow> {
    const w = WAREHOUSE_ID.test(warehouseId) ? await repo.findWarehouse(db, caller.accountId, warehouseId) : undefined;
    if (!w) throw refused(`not authorized for warehouse ${JSON.stringify(warehouseId.slice(0, 64))}: it is not registered for your partner account`, { type: 'warehouse-scope' });
    if (w.principals !== null && !w.principals.includes(caller.sub)) {
      throw refused(`not authorized for warehouse ${warehouseId}: your credential is not scoped to it`, { type: 'warehouse-scope' });
    }
    return w;
  }

  /** Envelope rules beyond its schema: formats (422), then the partner (403), then the warehouse (403). */
  private async checkEnvelope(caller: Caller, env: { partner_id: string; correlation_id: string; warehouse_id: string }, items: number, maxItems: number, kind: string): Promise<void> {
    if (!UUID.test(env.partner_id)) throw unprocessable(`partner_id must be your partner account id (a UUID); got ${JSON.stringify(env.partner_id.slice(0, 64))}`);
    if (!CORRELATION_ID.test(env.correlation_id)) throw unprocessable('correlation_id must be 1-128 characters of A-Z a-z 0-9 . _ : -');
    if (!WAREHOUSE_ID.test(env.warehouse_id)) throw unprocessable('warehouse_id must be 1-64 characters of A-Z a-z 0-9 . _ -');
    if (items > maxItems) throw unprocessable(`a ${kind} holds at most ${maxItems} items; got ${items}${kind === 'batch' ? ' (send more as a bulk job: POST /wms-ingest/v1/jobs)' : ''}`);
    if (env.partner_id.toLowerCase() !== caller.accountId) throw refused('not authorized for this partner_id: your credential belongs to another partner account', { type: 'partner-scope' });
    await this.authorizeWarehouse(caller, env.warehouse_id);
  }

  /**
   * Request-level idempotency keyed by (partner, correlation_id): the key is claimed in the
   * transaction that does the work and stores the answer, so a concurrent twin waits on the key
   * and then reads the committed answer, and a failed attempt leaves no trace. The same key with
   * a different request is 409.
   */
  private async idempotent<T>(caller: Caller, correlationId: string, hash: string, work: (tx: Tx, uow: Parameters<Parameters<ActorStore['run']>[0]>[0]) => Promise<{ status: number; body: T }>): Promise<Answer<T>> {
    return this.d.actors.run(async (uow) => {
      const tx = uow.sql;
      if (!(await repo.claimRequest(tx, caller.accountId, correlationId, hash))) {
        const stored = await repo.storedRequest(tx, caller.accountId, correlationId);
        if (!stored || stored.request_hash !== hash) {
          throw conflict(`correlation_id ${correlationId} was already used for a different request; use a new correlation_id for new content`, { type: 'correlation-id-reused' });
        }
        return { status: stored.response_status, body: stored.response as T, replayed: true };
      }
      const answer = await work(tx, uow);
      await repo.completeRequest(tx, caller.accountId, correlationId, answer.status, answer.body);
      return { ...answer, replayed: false };
    });
  }

  // ---- batches

  async batch(caller: Caller, resource: ResourceName, body: BatchBody): Promise<Answer<unknown>> {
    await this.checkEnvelope(caller, body, body.items.length, BATCH_MAX_ITEMS, 'batch');
    if (body.mode === 'FULL_REFRESH') throw unprocessable('a FULL_REFRESH replaces the whole set and runs as a bulk job (POST /wms-ingest/v1/jobs); batches are DELTA');
    const scope: Scope = { accountId: caller.accountId, warehouseId: body.warehouse_id, resource };
    const hash = crypto.hash('sha256', JSON.stringify({ resource, ...body }), 'hex');
    return this.idempotent(caller, body.correlation_id, hash, async (tx) => {
      // shared: batches run side by side; a job's creation (exclusive) waits for them
      await repo.lockScope(tx, scope, 'shared');
      const running = (await repo.inFlightJobs(tx, scope)).find((j) => j.mode === 'FULL_REFRESH');
      if (running) throw conflict(`a FULL_REFRESH job (${running.id}) of ${resource} for warehouse ${scope.warehouseId} is ${running.state}; send this batch after it completed`, { type: 'full-refresh-in-flight', extra: { job_id: running.id } });
      const results = await processItemsIsolated(tx, scope, { correlationId: body.correlation_id }, body.items);
      await this.d.faults('ingest.batch.processed');
      return {
        status: 200,
        body: { partner_id: body.partner_id, correlation_id: body.correlation_id, warehouse_id: body.warehouse_id, resource, mode: body.mode, summary: summarize(results), results },
      };
    });
  }

  // ---- jobs

  /**
   * A bulk job from its spooled upload (src/ingest/jobBody.ts): the items are staged from the
   * spool file a block at a time, never held whole. Items refused when read (too
   * large) or when staged (the database refuses them) are staged as placeholders with their
   * error recorded; the worker reports them REJECTED and goes on with the others.
   */
  async createJob(caller: Caller, upload: JobUpload): Promise<Answer<unknown>> {
    const body = upload.envelope;
    await this.checkEnvelope(caller, body, upload.items, this.d.jobMaxItems, 'bulk job');
    if (upload.items === 0) throw unprocessable('a bulk job needs at least one item');
    const scope: Scope = { accountId: caller.accountId, warehouseId: body.warehouse_id, resource: body.resource };
    const release = await this.staging.take();
    try {
      return await this.stageJob(caller, upload, scope);
    } finally {
      release();
    }
  }

  private stageJob(caller: Caller, upload: JobUpload, scope: Scope): Promise<Answer<unknown>> {
    const body = upload.envelope;
    return this.idempotent(caller, body.correlation_id, upload.hash, async (tx, uow) => {
      await repo.lockScope(tx, scope);
      const inFlight = await repo.inFlightJobs(tx, scope);
      const blocking = body.mode === 'FULL_REFRESH' ? inFlight[0] : inFlight.find((j) => j.mode === 'FULL_REFRESH');
      if (blocking) {
        throw conflict(`${body.mode === 'FULL_REFRESH' ? 'a FULL_REFRESH cannot start while' : 'no job may start while a FULL_REFRESH'} job ${blocking.id} of ${body.resource} for warehouse ${scope.warehouseId} is ${blocking.state}; inspect it and resubmit after it completed`, { type: 'job-in-flight', extra: { job_id: blocking.id } });
      }
      const id = upload.jobId;
      const now = this.d.clock.now();
      await repo.insertJob(tx, { id, account_id: caller.accountId, correlation_id: body.correlation_id, warehouse_id: scope.warehouseId, resource: scope.resource, mode: body.mode, total_items: upload.items, created_at: now });
      const refused = [...upload.intakeErrors];
      await this.stageItems(tx, upload, refused);
      await repo.insertJobErrors(tx, id, refused.map((e) => ({ seq: e.index + 1, source_id: null, status: 'REJECTED', code: e.code, reason: e.reason, quarantine_id: null })));
      await uow.create(ingestJobKind, id, { id, accountId: caller.accountId, warehouseId: scope.warehouseId, resource: scope.resource, mode: body.mode, totalItems: upload.items, createdAt: now.toISOString() });
      await this.d.jobs.boss.send(RUN_JOB, { id }, { db: bossDb(tx) } as never);
      const job = await repo.findJob(tx, id);
      return { status: 202, body: this.jobView(job!) };
    });
  }

  /**
   * Stages the spooled items, STAGE_BLOCK_BYTES of rows per statement, each in a savepoint.
   * When the database refuses a block, its rows go again one by one, each in a savepoint: a
   * refused one is staged as a placeholder (JSON null) and its error recorded.
   */
  private async stageItems(tx: Tx, upload: JobUpload, refused: IntakeError[]): Promise<void> {
    for await (const block of upload.blocks(STAGE_BLOCK_BYTES)) {
      try {
        await tx.savepoint((sp) => repo.insertJobItems(sp, upload.jobId, block));
        continue;
      } catch (err) {
        if (!refusedByDatabase(err)) throw err;
      }
      for (const row of block.split('\n')) {
        if (!row) continue;
        const seq = Number(row.split(SPOOL_DELIMITER)[1]);
        try {
          await tx.savepoint((sp) => repo.insertJobItems(sp, upload.jobId, row));
        } catch (err) {
          const reason = refusedByDatabase(err);
          if (!reason) throw err;
          await repo.insertJobItems(tx, upload.jobId, [upload.jobId, seq, '', 'null'].join(SPOOL_DELIMITER));
          refused.push({ index: seq - 1, code: 'UNSTORABLE', reason });
        }
      }
    }
  }

  private jobView(j: repo.JobRow) {
    const url = `${this.d.baseUrl}/wms-ingest/v1/jobs/${j.id}`;
    const expires = j.completed_at ? new Date(j.completed_at.getTime() + ERRORS_KEPT_DAYS * 86_400_000) : null;
    return {
      job_id: j.id, partner_id: j.account_id, correlation_id: j.correlation_id, warehouse_id: j.warehouse_id,
      resource: j.resource as ResourceName, mode: j.mode, state: j.state as 'QUEUED', total_items: j.total_items,
      processed_items: j.processed_through, accepted: j.accepted, replayed: j.replayed, quarantined: j.quarantined,
      rejected: j.rejected, deleted: j.deleted, created_at: iso(j.created_at), started_at: iso(j.started_at), completed_at: iso(j.completed_at),
      status_url: url,
      ...(j.state === 'COMPLETED_WITH_ERRORS' ? { errors_url: `${url}/errors` } : {}),
      errors_expire_at: iso(expires),
    };
  }

  /** A job of the caller's partner (another partner's reads as absent) in a warehouse the caller is scoped to. */
  private async visibleJob(caller: Caller, jobId: string): Promise<repo.JobRow> {
    const job = UUID.test(jobId) ? await repo.findJob(this.d.sql, jobId.toLowerCase()) : undefined;
    if (!job || job.account_id !== caller.accountId) throw notFound(`job ${jobId.slice(0, 64)} not found`);
    await this.authorizeWarehouse(caller, job.warehouse_id);
    return job;
  }

  async listJobs(caller: Caller, q: { warehouse_id: string; state?: string; page_token?: string; limit: number }) {
    await this.authorizeWarehouse(caller, q.warehouse_id);
    const list = `jobs:${q.warehouse_id}:${q.state ?? '*'}`;
    const before = readPageToken(q.page_token, list);
    const rows = await repo.jobsPage(this.d.sql, caller.accountId, q.warehouse_id, { state: q.state, beforeSeq: before, limit: q.limit + 1 });
    const page = rows.slice(0, q.limit);
    const hasMore = rows.length > q.limit;
    return { items: page.map((j) => this.jobView(j)), next_page_token: hasMore ? pageToken(list, page.at(-1)!.seq) : null, has_more: hasMore };
  }

  async getJob(caller: Caller, jobId: string) {
    return this.jobView(await this.visibleJob(caller, jobId));
  }

  async jobErrors(caller: Caller, jobId: string, q: { page_token?: string; limit: number }) {
    const job = await this.visibleJob(caller, jobId);
    const after = readPageToken(q.page_token, `job:${job.id}`);
    if (job.completed_at && this.d.clock.now().getTime() > job.completed_at.getTime() + ERRORS_KEPT_DAYS * 86_400_000) {
      throw notFound(`the errors of job ${job.id} expired ${ERRORS_KEPT_DAYS} days after it completed`);
    }
    const rows = await repo.jobErrorsPage(this.d.sql, job.id, after, q.limit + 1);
    const page = rows.slice(0, q.limit);
    const hasMore = rows.length > q.limit;
    return {
      items: page.map((r) => ({ index: r.seq - 1, source_id: r.source_id, status: r.status, code: r.code, reason: r.reason, quarantine_id: r.quarantine_id })),
      next_page_token: hasMore ? pageToken(`job:${job.id}`, page.at(-1)!.seq) : null,
      has_more: hasMore,
    };
  }

  /**
   * The worker of a bulk job: chunks of JOB_CHUNK items, each processed and checkpointed in one
   * transaction (a crash resumes after the last committed chunk; an item's failure is an error
   * row, never the job's), then FINISH (and a full refresh's deletions) in one more.
   */
  async runJob(id: string): Promise<void> {
    let job = await repo.findJob(this.d.sql, id);
    // queued in the transaction that inserted the row: absent means deleted since
    if (!job) return void this.d.log.warn({ jobId: id }, 'ingest job row not found; nothing to run');
    if (job.state === 'QUEUED') await this.d.actors.run((uow) => uow.trySend(ingestJobKind, id, { type: 'START', at: this.d.clock.now().toISOString() }));
    else if (job.state !== 'RUNNING') return;
    const scope: Scope = { accountId: job.account_id, warehouseId: job.warehouse_id, resource: job.resource as ResourceName };
    let from = job.processed_through;
    for (;;) {
      const through = await this.d.sql.begin((tx) => this.runChunk(tx, job!, scope, from)).catch((err: unknown) => {
        if (err instanceof ChunkTaken) return undefined;
        throw err;
      });
      if (through === undefined) return void this.d.log.info({ jobId: id, after: from }, 'ingest job: another worker processed this chunk; leaving the job to it');
      if (through === from) break;
      await this.d.faults('ingest.job.chunk');
      from = through;
    }
    job = (await repo.findJob(this.d.sql, id))!;
    const errors = job.quarantined + job.rejected;
    await this.d.actors.run(async (uow) => {
      const finished = await uow.trySend(ingestJobKind, id, { type: 'FINISH', at: this.d.clock.now().toISOString(), errors });
      if ('refused' in finished) return;
      if (job!.mode === 'FULL_REFRESH') await repo.setDeleted(uow.sql, id, await repo.deleteNotRefreshed(uow.sql, id, scope));
      await repo.deleteJobItems(uow.sql, id);
    });
  }

  /**
   * One chunk of a job in the caller's transaction: up to JOB_CHUNK items after `from`, read
   * and processed a page (JOB_PAGE items, JOB_PAGE_BYTES) at a time (so the worker holds one page, not the chunk),
   * then the checkpoint. Returns the last item's sequence number (`from` when none was left).
   */
  private async runChunk(tx: Tx, job: repo.JobRow, scope: Scope, from: number): Promise<number> {
    const totals = { accepted: 0, replayed: 0, quarantined: 0, rejected: 0 };
    let through = from;
    while (through - from < JOB_CHUNK) {
      const limit = Math.min(JOB_PAGE, JOB_CHUNK - (through - from));
      const page = await repo.jobItems(tx, job.id, through, limit, JOB_PAGE_BYTES);
      if (page.length === 0) break;
      const last = page.at(-1)!.seq;
      const results = await processItemsIsolated(tx, scope, { correlationId: job.correlation_id, jobId: job.id }, page.map((c) => c.item), { firstIndex: page[0].seq - 1 });
      // items refused when the job was created are placeholders: their recorded error is their result
      const refused = new Map((await repo.jobErrorsBetween(tx, job.id, through, last)).map((e) => [e.seq, e]));
      for (const r of results) {
        const e = refused.get(r.index + 1);
        if (e) Object.assign(r, { status: 'REJECTED', source_id: e.source_id, code: e.code, reason: e.reason });
      }
      await repo.insertJobErrors(tx, job.id, results.filter(isError).map((r) => ({
        seq: r.index + 1, source_id: r.source_id, status: r.status as 'QUARANTINED' | 'REJECTED', code: r.code!, reason: r.reason!, quarantine_id: r.quarantine_id ?? null,
      })));
      const n = summarize(results);
      for (const k of Object.keys(totals) as (keyof typeof totals)[]) totals[k] += n[k];
      through = last;
    }
    // another worker got here first (a resumed or expired run): ours rolls back and leaves the job to it
    if (through > from && !(await repo.advanceJob(tx, job.id, from, through, totals))) throw new ChunkTaken();
    return through;
  }

  /**
   * Queues every job not completed (at start-up of a worker node): a job whose worker died
   * resumes from its last chunk now rather than when its pg-boss lease expires. A job that is
   * still running elsewhere is safe: the checkpoint lets one worker commit each chunk.
   */
  async resumeJobs(): Promise<number> {
    const open = await repo.openJobIds(this.d.sql);
    for (const id of open) await this.d.jobs.send(RUN_JOB, { id });
    return open.length;
  }

  // ---- quarantine

  private entryView(r: repo.QuarantineRow) {
    return {
      quarantine_id: r.id, partner_id: r.account_id, warehouse_id: r.warehouse_id, resource: r.resource as ResourceName, source_id: r.source_id,
      source_version: r.source_version, code: r.code, reason: r.reason, item: r.item, correlation_id: r.correlation_id, job_id: r.job_id,
      created_at: iso(r.created_at),
    };
  }

  async listQuarantine(caller: Caller, q: { warehouse_id: string; resource?: ResourceName; page_token?: string; limit: number }) {
    await this.authorizeWarehouse(caller, q.warehouse_id);
    const list = `quarantine:${q.warehouse_id}:${q.resource ?? '*'}`;
    const after = readPageToken(q.page_token, list);
    const rows = await repo.quarantinePage(this.d.sql, caller.accountId, q.warehouse_id, { resource: q.resource, afterSeq: after, limit: q.limit + 1 });
    const page = rows.slice(0, q.limit);
    const hasMore = rows.length > q.limit;
    return { items: page.map((r) => this.entryView(r)), next_page_token: hasMore ? pageToken(list, page.at(-1)!.seq) : null, has_more: hasMore };
  }

  private async visibleEntry(caller: Caller, id: string, db: Db, lock = false): Promise<repo.QuarantineRow> {
    const row = UUID.test(id) ? await repo.findQuarantine(db, caller.accountId, id.toLowerCase(), lock) : undefined;
    if (!row) throw notFound(`quarantine entry ${id.slice(0, 64)} not found (released and discarded entries are gone)`);
    await this.authorizeWarehouse(caller, row.warehouse_id, db);
    return row;
  }

  async getQuarantine(caller: Caller, id: string) {
    return this.entryView(await this.visibleEntry(caller, id, this.d.sql));
  }

  /**
   * Release: the held item is stored as reviewed (its business rule overridden), unless a newer
   * version was stored meanwhile (REPLAY). The entry goes in the same transaction; a concurrent
   * release of the same entry finds it gone (404).
   */
  async releaseQuarantine(caller: Caller, id: string): Promise<ItemResult> {
    return this.d.sql.begin(async (tx) => {
      const row = await this.visibleEntry(caller, id, tx, true);
      const scope: Scope = { accountId: row.account_id, warehouseId: row.warehouse_id, resource: row.resource as ResourceName };
      const [result] = await processItems(tx, scope, { correlationId: row.correlation_id, jobId: row.job_id ?? undefined }, [row.item], { force: true });
      await repo.deleteQuarantine(tx, caller.accountId, row.id);
      return { ...result, quarantine_id: row.id };
    });
  }

  async discardQuarantine(caller: Caller, id: string): Promise<void> {
    await this.d.sql.begin(async (tx) => {
      const row = await this.visibleEntry(caller, id, tx, true);
      await repo.deleteQuarantine(tx, caller.accountId, row.id);
    });
  }

  // ---- warehouses (admins of the partner account)

  private warehouseView(w: repo.WarehouseRow) {
    return { warehouse_id: w.warehouse_id, name: w.name, principals: w.principals, created_at: iso(w.created_at), updated_at: iso(w.updated_at) };
  }

  async putWarehouse(caller: Caller, warehouseId: string, body: { name: string; principals: string[] | null }) {
    if (!WAREHOUSE_ID.test(warehouseId)) throw unprocessable('warehouse_id must be 1-64 characters of A-Z a-z 0-9 . _ -');
    const { row, created } = await repo.putWarehouse(this.d.sql, { account_id: caller.accountId, warehouse_id: warehouseId, name: body.name, principals: body.principals });
    return { created, view: this.warehouseView(row) };
  }

  async listWarehouses(caller: Caller) {
    return (await repo.listWarehouses(this.d.sql, caller.accountId)).map((w) => this.warehouseView(w));
  }

  async deleteWarehouse(caller: Caller, warehouseId: string): Promise<void> {
    if (!(await repo.deleteWarehouse(this.d.sql, caller.accountId, warehouseId))) throw notFound(`warehouse ${warehouseId.slice(0, 64)} not found`);
  }

  // ---- retention

  async sweep(): Promise<void> {
    const r = await repo.sweep(this.d.sql, this.d.clock.now(), ERRORS_KEPT_DAYS, REQUESTS_KEPT_DAYS);
    if (r.errors || r.requests) this.d.log.info(r, 'ingest retention: expired job errors and idempotency keys deleted');
  }
}

class ChunkTaken extends Error {}

const isError = (r: ItemResult) => r.status === 'QUARANTINED' || r.status === 'REJECTED';
