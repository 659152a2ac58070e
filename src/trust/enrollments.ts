import type { Db, Sql } from '../db/client.js';
import { conflict, invalid, notFound, refused } from '../lib/errors.js';
import { iso } from '../lib/encoding.js';
import { unstorableField } from '../lib/text.js';
import { isUuid } from '../http/auth/principal.js';
import type { EnrollmentService } from './enrollment.js';
import { lifecycleRepo, type ThingScope } from './lifecycle.js';
import type { ModelService } from './models.js';
import type { EnrollmentResponse } from './schemas.js';
import type { ThingState } from '../../machines/thing.js';

export interface FactoryEnrollmentInput {
  /** the model's `vid:pid` descriptor or its id */
  model: string;
  serial: string;
  manufacturer?: string;
  csr?: string;
}

export interface EnrollmentView {
  id: string;
  thing_id: string;
  model_id: string | null;
  model: string;
  manufacturer: string;
  serial: string;
  method: string;
  enrolled_at: string;
  state: ThingState;
  revoked: boolean;
  /** the thing's newest certificate (null when none) */
  certificate_serial: string | null;
  certificate_not_after: string | null;
  certificate_revoked: boolean | null;
}

/**
 * Enrollments (spec: `/api/v1/enrollments`): the record of how a thing was enrolled, one per
 * enrolled thing (its id is the thing's id), whichever way it came in: the factory route here or
 * a device at `/ddi/v1/enroll`. Creating one births the thing in ROLLEDOFF through the device
 * path's identity mapping and certificate issuance.
 */
export class FactoryEnrollments {
  constructor(private readonly sql: Sql, private readonly models: ModelService, private readonly enrollment: EnrollmentService) {}

  /** 201 `created: true` for a new thing; 200 `created: false` when the (model, serial) exists. */
  async create(scope: ThingScope, input: FactoryEnrollmentInput): Promise<{ created: boolean; view: EnrollmentView & EnrollmentResponse }> {
    const bad = unstorableField({ ...input });
    if (bad) throw invalid(`${bad} must be Unicode text without NUL characters or unpaired surrogates`);
    const model = await this.models.resolve(input.model);
    if (!model) throw invalid(`model ${input.model} is not a registered model (send its vid:pid descriptor or id)`);
    if (model.account_id !== scope.accountId) throw refused(`model ${input.model} belongs to another account`);
    if (scope.modelId !== undefined && model.id !== scope.modelId) throw refused(`a factory service enrolls things of its own model (${scope.modelId}) only`);
    const descriptor = `${model.vid}:${model.pid}`;
    let manufacturer = input.manufacturer;
    if (manufacturer === undefined) {
      // (model, serial) names the thing: an existing one answers whatever its manufacturer
      const known = await lifecycleRepo.byModelSerial(this.sql, scope, { model: descriptor, serial: input.serial });
      if (known.length > 1) throw conflict(`several manufacturers have a thing with model ${descriptor} and serial ${input.serial}: add manufacturer`);
      manufacturer = known[0]?.manufacturer ?? model.name;
    }
    const enrolled = await this.enrollment.enrollByAccount({ accountId: scope.accountId, manufacturer, model: descriptor, serial: input.serial }, model, input.csr);
    return { created: enrolled.created, view: { ...(await this.get(scope, enrolled.thingId)), ...enrolled.response } };
  }

  async list(scope: ThingScope, q: { limit: number; after?: string; model_id?: string; method?: string }): Promise<{ items: EnrollmentView[]; next_cursor: string | null }> {
    const rows = await enrollmentsRepo.list(this.sql, scope, { ...q, limit: q.limit + 1 });
    const items = rows.slice(0, q.limit).map(present);
    return { items, next_cursor: rows.length > q.limit ? items[items.length - 1].id : null };
  }

  async get(scope: ThingScope, id: string): Promise<EnrollmentView> {
    const row = isUuid(id) ? await enrollmentsRepo.get(this.sql, scope, id) : undefined;
    if (!row) throw notFound(`enrollment ${id} not found`);
    return present(row);
  }
}

interface EnrollmentRow {
  id: string; model_id: string | null; model: string; manufacturer: string; serial: string; enrolled_by: string; enrolled_at: Date;
  state: ThingState; revoked: boolean; cert_serial: string | null; cert_not_after: Date | null; cert_revoked: boolean | null;
}

function present(r: EnrollmentRow): EnrollmentView {
  return {
    id: r.id, thing_id: r.id, model_id: r.model_id, model: r.model, manufacturer: r.manufacturer, serial: r.serial, method: r.enrolled_by,
    enrolled_at: iso(r.enrolled_at)!, state: r.state, revoked: r.revoked,
    certificate_serial: r.cert_serial, certificate_not_after: iso(r.cert_not_after), certificate_revoked: r.cert_revoked,
  };
}

const enrollmentsRepo = {
  async list(db: Db, scope: ThingScope, q: { limit: number; after?: string; model_id?: string; method?: string }): Promise<EnrollmentRow[]> {
    return db<EnrollmentRow[]>`
      select ${columns(db)} from things t ${certificateJoin(db)}
      where t.account_id = ${scope.accountId} and t.enrolled_at is not null
        ${scope.modelId === undefined ? db`` : db`and t.model_id = ${scope.modelId}`}
        ${q.model_id === undefined ? db`` : db`and t.model_id = ${q.model_id}`}
        ${q.method === undefined ? db`` : db`and t.enrolled_by = ${q.method}`}
        ${q.after === undefined ? db`` : db`and t.id > ${q.after}`}
      order by t.id limit ${q.limit}`;
  },
  async get(db: Db, scope: ThingScope, id: string): Promise<EnrollmentRow | undefined> {
    const [row] = await db<EnrollmentRow[]>`
      select ${columns(db)} from things t ${certificateJoin(db)}
      where t.id = ${id} and t.account_id = ${scope.accountId} and t.enrolled_at is not null
        ${scope.modelId === undefined ? db`` : db`and t.model_id = ${scope.modelId}`}`;
    return row;
  },
};

const columns = (db: Db) => db`t.id, t.model_id, t.model, t.manufacturer, t.serial, t.enrolled_by, t.enrolled_at, t.lifecycle_state as state,
  t.revoked_at is not null as revoked, c.serial as cert_serial, c.not_after as cert_not_after, c.revoked as cert_revoked`;
/** the thing's newest certificate */
const certificateJoin = (db: Db) => db`left join lateral (
  select serial, not_after, revoked from device_certificates where thing_id = t.id order by created_at desc limit 1) c on true`;
