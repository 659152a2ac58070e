import type { Db } from '../db/client.js';

/** SQL of PROVISION saga runs (table provisioning_runs; the legs are in the run actor's snapshot, read through the store). */

export interface RunRow {
  id: string;
  account_id: string;
  thing_id: string;
  model_id: string;
  started_by: string;
  created_at: Date;
  state: 'RUNNING' | 'SUCCEEDED' | 'FAILED';
  error: string | null;
  finished_at: Date | null;
}

export interface ListFilter {
  thing_id?: string;
  state?: string;
  after?: string;
  limit: number;
}

const SELECT = (db: Db) => db`
  select r.id, r.account_id, r.thing_id, r.model_id, r.started_by, r.created_at, r.state, r.error, r.finished_at
  from provisioning_runs r`;

export async function insert(db: Db, r: { id: string; accountId: string; thingId: string; modelId: string; startedBy: string; createdAt: string }): Promise<void> {
  await db`insert into provisioning_runs (id, account_id, thing_id, model_id, started_by, created_at)
    values (${r.id}, ${r.accountId}, ${r.thingId}, ${r.modelId}, ${r.startedBy}, ${r.createdAt})`;
}

/** A run of the account (of the model, for a factory service). */
export async function find(db: Db, accountId: string, id: string, modelId?: string): Promise<RunRow | undefined> {
  const [row] = await db<RunRow[]>`${SELECT(db)}
    where r.id = ${id} and r.account_id = ${accountId} ${modelId === undefined ? db`` : db`and r.model_id = ${modelId}`}`;
  return row;
}

/** Keyset page by id. */
export async function list(db: Db, scope: { accountId: string; modelId?: string }, f: ListFilter): Promise<RunRow[]> {
  return db<RunRow[]>`${SELECT(db)}
    where r.account_id = ${scope.accountId}
      ${scope.modelId === undefined ? db`` : db`and r.model_id = ${scope.modelId}`}
      ${f.thing_id ? db`and r.thing_id = ${f.thing_id}` : db``}
      ${f.state ? db`and r.state = ${f.state}` : db``}
      ${f.after ? db`and r.id > ${f.after}` : db``}
    order by r.id limit ${f.limit}`;
}

export async function exists(db: Db, id: string): Promise<boolean> {
  return (await db`select 1 from provisioning_runs where id = ${id}`).length > 0;
}

export async function runningOf(db: Db, thingId: string): Promise<string | undefined> {
  const [row] = await db<{ id: string }[]>`select id from provisioning_runs where thing_id = ${thingId} and state = 'RUNNING'`;
  return row?.id;
}

/** Ids of the runs still going, in keyset pages by id. */
export async function running(db: Db, after: string | undefined, limit: number): Promise<string[]> {
  const rows = await db<{ id: string }[]>`
    select id from provisioning_runs where state = 'RUNNING' ${after ? db`and id > ${after}` : db``} order by id limit ${limit}`;
  return rows.map((r) => r.id);
}

/** The model's ACTIVE factory services (the legs' backends). */
export async function activeServicesOfModel(db: Db, modelId: string): Promise<{ id: string; role: 'identify' | 'provision' }[]> {
  return db<{ id: string; role: 'identify' | 'provision' }[]>`
    select id, role from factory_services where model_id = ${modelId} and state = 'ACTIVE' order by role`;
}

/** What calling a service needs: its endpoint, its state and its (sealed) signing secret. */
export async function signingOf(db: Db, id: string): Promise<{ id: string; state: string; endpoint_url: string; access_key_id: string; secret_sealed: Buffer } | undefined> {
  const [row] = await db<{ id: string; state: string; endpoint_url: string; access_key_id: string; secret_sealed: Buffer }[]>`
    select id, state, endpoint_url, access_key_id, secret_sealed from factory_services where id = ${id}`;
  return row;
}

/** A leg in flight holds its factory service (drain waits until none is left). */
export async function addLegRef(db: Db, factoryServiceId: string, legId: string): Promise<void> {
  await db`insert into factory_service_leg_refs (factory_service_id, leg_id) values (${factoryServiceId}, ${legId})
    on conflict do nothing`;
}

export async function removeLegRef(db: Db, factoryServiceId: string, legId: string): Promise<void> {
  await db`delete from factory_service_leg_refs where factory_service_id = ${factoryServiceId} and leg_id = ${legId}`;
}
