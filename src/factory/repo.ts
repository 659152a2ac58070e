import type { Db } from '../db/client.js';

/** SQL of the factory domain. Every function takes the pool or a transaction: the service decides. */

export interface FactoryServiceRow {
  id: string;
  account_id: string;
  role: 'identify' | 'provision';
  model_id: string;
  registrar_id: string | null;
  endpoint_url: string;
  access_key_id: string;
  state: string;
  rotation_pending: boolean;
  deleted_at: Date | null;
  drained_at: Date | null;
  last_health_check_at: Date | null;
  last_health_check_status: 'HEALTHY' | 'UNHEALTHY' | null;
  last_health_check_http_status: number | null;
  last_health_check_latency_ms: number | null;
  last_health_check_error: string | null;
  /** the actions an account admin allowed; null: the role's default (src/factory/policy.ts) */
  policy_allow: string[] | null;
  created_at: Date;
  updated_at: Date;
}

/** What signature verification needs: the signing identity and its sealed secrets. */
export interface SigningRow {
  id: string;
  account_id: string;
  role: string;
  model_id: string;
  registrar_id: string | null;
  access_key_id: string;
  secret_sealed: Buffer;
  pending_secret_sealed: Buffer | null;
  policy_allow: string[] | null;
}

const COLUMNS = `id, account_id, role, model_id, registrar_id, endpoint_url, access_key_id, state, rotation_pending,
  deleted_at, drained_at, last_health_check_at, last_health_check_status, last_health_check_http_status,
  last_health_check_latency_ms, last_health_check_error, policy_allow, created_at, updated_at`;

export async function insert(db: Db, row: {
  id: string; account_id: string; role: string; model_id: string; registrar_id: string | null; endpoint_url: string;
  access_key_id: string; secret_sealed: Buffer; created_at: Date;
}): Promise<void> {
  // the projected columns (state, rotation_pending, deleted_at, drained_at) are the store's: the actor is created next
  await db`insert into factory_services (id, account_id, role, model_id, registrar_id, endpoint_url, access_key_id, secret_sealed, created_at, updated_at)
    values (${row.id}, ${row.account_id}, ${row.role}, ${row.model_id}, ${row.registrar_id}, ${row.endpoint_url}, ${row.access_key_id}, ${row.secret_sealed}, ${row.created_at}, ${row.created_at})`;
}

/** A service of the account that is not hard-deleted (others read as absent). */
export async function find(db: Db, accountId: string, id: string): Promise<FactoryServiceRow | undefined> {
  const [row] = await db<FactoryServiceRow[]>`
    select ${db.unsafe(COLUMNS)} from factory_services
    where id = ${id} and account_id = ${accountId} and state <> 'HARD_DELETED'`;
  return row;
}

export interface ListFilter {
  role?: string;
  state?: string;
  registrar?: string;
  model?: string;
  after?: string;
  limit: number;
}

/** Keyset page by id. */
export async function list(db: Db, accountId: string, f: ListFilter): Promise<FactoryServiceRow[]> {
  return db<FactoryServiceRow[]>`
    select ${db.unsafe(COLUMNS)} from factory_services
    where account_id = ${accountId} and state <> 'HARD_DELETED'
      ${f.role ? db`and role = ${f.role}` : db``}
      ${f.state ? db`and state = ${f.state}` : db``}
      ${f.registrar ? db`and registrar_id = ${f.registrar}` : db``}
      ${f.model ? db`and model_id = ${f.model}` : db``}
      ${f.after ? db`and id > ${f.after}` : db``}
    order by id limit ${f.limit}`;
}

export async function setEndpoint(db: Db, id: string, endpointUrl: string, at: Date): Promise<void> {
  await db`update factory_services set endpoint_url = ${endpointUrl}, updated_at = ${at} where id = ${id}`;
}

/** The service's policy (null: back to its role's default). */
export async function setPolicy(db: Db, id: string, allow: string[] | null, at: Date): Promise<void> {
  await db`update factory_services set policy_allow = ${allow === null ? null : db.array(allow)}::text[], updated_at = ${at} where id = ${id}`;
}

export async function setPendingSecret(db: Db, id: string, sealed: Buffer, at: Date): Promise<void> {
  await db`update factory_services set pending_secret_sealed = ${sealed}, updated_at = ${at} where id = ${id}`;
}

/** The pending secret becomes the only one. */
export async function promotePendingSecret(db: Db, id: string, at: Date): Promise<void> {
  await db`update factory_services set secret_sealed = pending_secret_sealed, pending_secret_sealed = null, updated_at = ${at}
    where id = ${id} and pending_secret_sealed is not null`;
}

export async function recordHealthCheck(db: Db, id: string, h: {
  at: Date; status: 'HEALTHY' | 'UNHEALTHY'; httpStatus: number | null; latencyMs: number | null; error: string | null;
}): Promise<void> {
  await db`update factory_services set last_health_check_at = ${h.at}, last_health_check_status = ${h.status},
    last_health_check_http_status = ${h.httpStatus}, last_health_check_latency_ms = ${h.latencyMs},
    last_health_check_error = ${h.error} where id = ${id}`;
}

/** Saga legs in flight that reference the service (the saga fills factory_service_leg_refs). */
export async function activeLegCount(db: Db, id: string): Promise<number> {
  const [{ n }] = await db<{ n: number }[]>`select count(*)::int as n from factory_service_leg_refs where factory_service_id = ${id}`;
  return n;
}

/** Garbage collection of a hard-deleted service's row (leg refs cascade); the store deletes its actor in the same unit of work. */
export async function purge(db: Db, id: string): Promise<boolean> {
  const rows = await db`delete from factory_services where id = ${id} and state = 'HARD_DELETED'`;
  return rows.count > 0;
}

/** Hard-deleted services not yet collected (a crash may have lost their job). */
export async function uncollected(db: Db): Promise<string[]> {
  const rows = await db<{ id: string }[]>`select id from factory_services where state = 'HARD_DELETED'`;
  return rows.map((r) => r.id);
}

/** Soft-deleted services whose drain is due. */
export async function drainDue(db: Db, before: Date): Promise<string[]> {
  const rows = await db<{ id: string }[]>`select id from factory_services where state = 'SOFT_DELETED' and deleted_at <= ${before}`;
  return rows.map((r) => r.id);
}

// --- signed requests -------------------------------------------------------------------------

/** The signing identity of an access key id, while its service is ACTIVE. */
export async function signingIdentity(db: Db, accessKeyId: string): Promise<SigningRow | undefined> {
  const [row] = await db<SigningRow[]>`
    select id, account_id, role, model_id, registrar_id, access_key_id, secret_sealed, pending_secret_sealed, policy_allow
    from factory_services where access_key_id = ${accessKeyId} and state = 'ACTIVE'`;
  return row;
}

/** Records signatures (distinct hashes); answers the ones that were new (the others are replays). */
export async function rememberSignatures(db: Db, hashes: Buffer[], expiresAt: Date[]): Promise<Set<string>> {
  const rows = await db<{ h: string }[]>`
    insert into factory_signature_replays (signature_hash, expires_at)
    select decode(h, 'hex'), e::timestamptz
    from unnest(${db.array(hashes.map((h) => h.toString('hex')))}::text[], ${db.array(expiresAt.map((d) => d.toISOString()))}::text[]) as t(h, e)
    on conflict do nothing returning encode(signature_hash, 'hex') as h`;
  return new Set(rows.map((r) => r.h));
}

export async function sweepSignatures(db: Db, now: Date): Promise<number> {
  const rows = await db`delete from factory_signature_replays where expires_at < ${now}`;
  return rows.count;
}

/** How many factory services (any state) are bound to a model (trust's model delete names them). */
export async function servicesOfModel(db: Db, modelId: string): Promise<number> {
  const [{ n }] = await db<{ n: number }[]>`select count(*)::int as n from factory_services where model_id = ${modelId}`;
  return n;
}
