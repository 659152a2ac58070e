import type { Db } from '../db/client.js';
import type { REGISTRAR_STATES } from '../../machines/registrar.js';
import type { ACCESS_REQUEST_STATES } from '../../machines/accessRequest.js';
import type { FACTORY_REGISTRATION_STATES } from '../../machines/factoryRegistration.js';
import type { ELIGIBILITY_GRANT_STATES } from '../../machines/eligibilityGrant.js';
import type { REFERENCE_REQUEST_STATES } from '../../machines/referenceRequest.js';

/**
 * SQL of the registry domain. Every function takes the pool or the caller's transaction. Things and
 * models are trust's: read through its read models thing_directory and model_directory (migration 1700).
 */

/** Keyset page: `limit + 1` rows asked for; the extra one says whether there is a next page. */
export function page<R extends { id: string }, V>(rows: R[], limit: number, view: (r: R) => V): { items: V[]; next_cursor: string | null } {
  const more = rows.length > limit;
  const kept = rows.slice(0, limit);
  return { items: kept.map(view), next_cursor: more ? kept[kept.length - 1].id : null };
}
const after = (db: Db, cursor: string | undefined, column = 'id') => (cursor ? db`${db(column)} > ${cursor}` : db`true`);
const eq = (db: Db, column: string, value: string | undefined) => (value === undefined ? db`true` : db`${db(column)} = ${value}`);

// --- vendors ----------------------------------------------------------------------------------
export interface VendorRow { account_id: string; vid: string; created_by: string; created_at: Date }

export async function vendorOf(db: Db, accountId: string): Promise<VendorRow | undefined> {
  const [row] = await db<VendorRow[]>`select * from vendors where account_id = ${accountId}`;
  return row;
}
export async function vendorByVid(db: Db, vid: string): Promise<VendorRow | undefined> {
  const [row] = await db<VendorRow[]>`select * from vendors where vid = ${vid}`;
  return row;
}
/**
 * The next VID of the pool that no model of another account already uses; inserted unless the
 * account got one meanwhile (`on conflict`: concurrent assignments converge on one namespace).
 */
export async function assignVendor(db: Db, accountId: string, by: string): Promise<VendorRow | undefined> {
  for (;;) {
    const [{ vid }] = await db<{ vid: string }[]>`select upper(lpad(to_hex(nextval('vendor_vid_seq')), 4, '0')) as vid`;
    const [taken] = await db`select 1 from model_directory where vid = ${vid} and account_id <> ${accountId} limit 1`;
    if (taken) continue;
    const [row] = await db<VendorRow[]>`
      insert into vendors (account_id, vid, created_by) values (${accountId}, ${vid}, ${by})
      on conflict (account_id) do nothing returning *`;
    return row;
  }
}

// --- registrars -------------------------------------------------------------------------------
export interface RegistrarRow {
  id: string; account_id: string; name: string; description: string; state: (typeof REGISTRAR_STATES)[number]; canonical_model_id: string | null;
  decided_at: Date | null; decided_by: string | null; reason: string | null; created_at: Date; updated_at: Date;
}

export async function insertRegistrar(db: Db, r: { id: string; accountId: string; name: string; description: string; at: Date }): Promise<void> {
  await db`insert into registrars (id, account_id, name, description, created_at, updated_at)
    values (${r.id}, ${r.accountId}, ${r.name}, ${r.description}, ${r.at}, ${r.at})`;
}
/** A live (not deleted) registrar; of `accountId` when given. */
/** `share`: locked until commit (a delete of the registrar waits for the caller's transaction). */
export async function registrar(db: Db, id: string, accountId?: string, opts: { share?: boolean } = {}): Promise<RegistrarRow | undefined> {
  const [row] = await db<RegistrarRow[]>`
    select * from registrars where id = ${id} and state <> 'DELETED' and ${eq(db, 'account_id', accountId)} ${opts.share ? db`for share` : db``}`;
  return row;
}
/** A live registrar its account reads, and so does an account whose access request to it was APPROVED. */
export async function readableRegistrar(db: Db, id: string, accountId: string): Promise<RegistrarRow | undefined> {
  const [row] = await db<RegistrarRow[]>`
    select * from registrars g where id = ${id} and state <> 'DELETED'
      and (account_id = ${accountId} or exists (select 1 from access_requests a
        where a.registrar_id = g.id and a.requester_account_id = ${accountId} and a.state = 'APPROVED'))`;
  return row;
}
export async function listRegistrars(db: Db, f: { accountId?: string; state?: string; after?: string; limit: number }): Promise<RegistrarRow[]> {
  return db<RegistrarRow[]>`
    select * from registrars where state <> 'DELETED' and ${eq(db, 'account_id', f.accountId)} and ${eq(db, 'state', f.state)} and ${after(db, f.after)}
    order by id limit ${f.limit + 1}`;
}
export async function updateRegistrar(db: Db, id: string, p: { name?: string; description?: string; at: Date }): Promise<void> {
  await db`update registrars set name = coalesce(${p.name ?? null}, name), description = coalesce(${p.description ?? null}, description), updated_at = ${p.at}
    where id = ${id}`;
}
export async function touchRegistrar(db: Db, id: string, at: Date): Promise<void> {
  await db`update registrars set updated_at = ${at} where id = ${id}`;
}
/** The account's own model (not internal) */
/** How many registrars have the model as their canonical model (trust's model delete names them). */
export async function registrarsOfModel(db: Db, modelId: string): Promise<number> {
  const [{ n }] = await db<{ n: number }[]>`select count(*)::int as n from registrars where canonical_model_id = ${modelId}`;
  return n;
}
export async function ownModel(db: Db, accountId: string, modelId: string): Promise<boolean> {
  const [row] = await db`select 1 from model_directory where id = ${modelId} and account_id = ${accountId} and not internal`;
  return Boolean(row);
}
/** Reference requests still standing against a registrar (pending or approved). */
export async function openReferenceRequests(db: Db, registrarId: string): Promise<string[]> {
  const rows = await db<{ id: string }[]>`select id from reference_requests where registrar_id = ${registrarId} and state in ('PENDING', 'APPROVED')`;
  return rows.map((r) => r.id);
}

// --- access requests --------------------------------------------------------------------------
export interface AccessRequestRow {
  id: string; requester_account_id: string; owner_account_id: string; registrar_id: string; note: string | null; state: (typeof ACCESS_REQUEST_STATES)[number];
  decided_at: Date | null; decided_by: string | null; reason: string | null; created_at: Date;
}
export async function insertAccessRequest(db: Db, r: { id: string; requester: string; owner: string; registrarId: string; note: string | null; at: Date }): Promise<boolean> {
  const rows = await db`insert into access_requests (id, requester_account_id, owner_account_id, registrar_id, note, created_at)
    values (${r.id}, ${r.requester}, ${r.owner}, ${r.registrarId}, ${r.note}, ${r.at}) on conflict do nothing`;
  return rows.count === 1;
}
export async function pendingAccessRequest(db: Db, requester: string, registrarId: string): Promise<string | undefined> {
  const [row] = await db<{ id: string }[]>`select id from access_requests where requester_account_id = ${requester} and registrar_id = ${registrarId} and state = 'PENDING'`;
  return row?.id;
}
/** Visible to the requester and to the owner only. */
export async function accessRequest(db: Db, id: string, accountId: string): Promise<AccessRequestRow | undefined> {
  const [row] = await db<AccessRequestRow[]>`
    select * from access_requests where id = ${id} and (owner_account_id = ${accountId} or requester_account_id = ${accountId})`;
  return row;
}
export async function listAccessRequests(db: Db, accountId: string, f: { role?: 'owner' | 'requester'; state?: string; after?: string; limit: number }): Promise<AccessRequestRow[]> {
  const side = f.role === 'owner' ? db`owner_account_id = ${accountId}`
    : f.role === 'requester' ? db`requester_account_id = ${accountId}`
      : db`(owner_account_id = ${accountId} or requester_account_id = ${accountId})`;
  return db<AccessRequestRow[]>`select * from access_requests where ${side} and ${eq(db, 'state', f.state)} and ${after(db, f.after)} order by id limit ${f.limit + 1}`;
}

// --- factory registrations --------------------------------------------------------------------
export interface FactoryRegistrationRow {
  account_id: string; state: (typeof FACTORY_REGISTRATION_STATES)[number]; note: string | null; requested_at: Date; requested_by: string;
  decided_at: Date | null; decided_by: string | null; reason: string | null;
}
export async function factoryRegistration(db: Db, accountId: string): Promise<FactoryRegistrationRow | undefined> {
  const [row] = await db<FactoryRegistrationRow[]>`select * from factory_registrations where account_id = ${accountId}`;
  return row;
}
/** The operator's queue, oldest request first; the cursor is the last account id of the page. */
export async function pendingRegistrations(db: Db, f: { after?: string; limit: number }): Promise<FactoryRegistrationRow[]> {
  const from = f.after
    ? db`(requested_at, account_id) > (select requested_at, account_id from factory_registrations where account_id = ${f.after})`
    : db`true`;
  return db<FactoryRegistrationRow[]>`select * from factory_registrations where state = 'REQUESTED' and ${from}
    order by requested_at, account_id limit ${f.limit + 1}`;
}

// --- eligibility ------------------------------------------------------------------------------
export interface ArtifactRow {
  id: string; account_id: string; token_hash: Buffer; note: string | null; expires_at: Date; revoked_at: Date | null; created_by: string; created_at: Date;
}
export async function insertArtifact(db: Db, a: { id: string; accountId: string; tokenHash: Buffer; note: string | null; expiresAt: Date; by: string; at: Date }): Promise<ArtifactRow> {
  const [row] = await db<ArtifactRow[]>`insert into eligibility_artifacts (id, account_id, token_hash, note, expires_at, created_by, created_at)
    values (${a.id}, ${a.accountId}, ${a.tokenHash}, ${a.note}, ${a.expiresAt}, ${a.by}, ${a.at}) returning *`;
  return row;
}
export async function artifact(db: Db, id: string, accountId: string): Promise<ArtifactRow | undefined> {
  const [row] = await db<ArtifactRow[]>`select * from eligibility_artifacts where id = ${id} and account_id = ${accountId}`;
  return row;
}
export async function artifactByHash(db: Db, hash: Buffer): Promise<ArtifactRow | undefined> {
  const [row] = await db<ArtifactRow[]>`select * from eligibility_artifacts where token_hash = ${hash} for share`;
  return row;
}
export async function listArtifacts(db: Db, accountId: string, f: { after?: string; limit: number }): Promise<ArtifactRow[]> {
  return db<ArtifactRow[]>`select * from eligibility_artifacts where account_id = ${accountId} and ${after(db, f.after)} order by id limit ${f.limit + 1}`;
}
export async function revokeArtifact(db: Db, id: string, accountId: string, at: Date): Promise<boolean> {
  const rows = await db`update eligibility_artifacts set revoked_at = coalesce(revoked_at, ${at}) where id = ${id} and account_id = ${accountId}`;
  return rows.count === 1;
}

export interface GrantRow {
  id: string; artifact_id: string; owner_account_id: string; requester_account_id: string; state: (typeof ELIGIBILITY_GRANT_STATES)[number];
  decided_at: Date | null; decided_by: string | null; reason: string | null; created_by: string; created_at: Date;
}
export async function insertGrant(db: Db, g: { id: string; artifactId: string; owner: string; requester: string; by: string; at: Date }): Promise<boolean> {
  const rows = await db`insert into eligibility_grants (id, artifact_id, owner_account_id, requester_account_id, created_by, created_at)
    values (${g.id}, ${g.artifactId}, ${g.owner}, ${g.requester}, ${g.by}, ${g.at}) on conflict do nothing`;
  return rows.count === 1;
}
export async function grantOf(db: Db, artifactId: string, requester: string): Promise<GrantRow | undefined> {
  const [row] = await db<GrantRow[]>`select * from eligibility_grants where artifact_id = ${artifactId} and requester_account_id = ${requester}`;
  return row;
}
export async function grant(db: Db, id: string): Promise<GrantRow | undefined> {
  const [row] = await db<GrantRow[]>`select * from eligibility_grants where id = ${id}`;
  return row;
}
export async function listGrants(db: Db, accountId: string, f: { role: 'owner' | 'requester'; state?: string; after?: string; limit: number }): Promise<GrantRow[]> {
  const side = f.role === 'owner' ? db`owner_account_id = ${accountId}` : db`requester_account_id = ${accountId}`;
  return db<GrantRow[]>`select * from eligibility_grants where ${side} and ${eq(db, 'state', f.state)} and ${after(db, f.after)} order by id limit ${f.limit + 1}`;
}
/** Is `requester` an eligible accessor of `owner` (an approved grant)? */
export async function eligible(db: Db, owner: string, requester: string): Promise<boolean> {
  const [row] = await db`select 1 from eligibility_grants where owner_account_id = ${owner} and requester_account_id = ${requester} and state = 'APPROVED' limit 1`;
  return Boolean(row);
}

// --- reference requests and thing references --------------------------------------------------
export interface ReferenceFilter { serial_prefix?: string; manufacturer?: string }
export interface ReferenceRequestRow {
  id: string; requester_account_id: string; owner_account_id: string; registrar_id: string; filter: ReferenceFilter; note: string | null; state: (typeof REFERENCE_REQUEST_STATES)[number];
  decided_at: Date | null; decided_by: string | null; reason: string | null; revoked_at: Date | null; created_by: string; created_at: Date;
}
export async function insertReferenceRequest(db: Db, r: { id: string; requester: string; owner: string; registrarId: string; filter: ReferenceFilter; note: string | null; by: string; at: Date }): Promise<void> {
  await db`insert into reference_requests (id, requester_account_id, owner_account_id, registrar_id, filter, note, created_by, created_at)
    values (${r.id}, ${r.requester}, ${r.owner}, ${r.registrarId}, ${db.json(r.filter as never)}, ${r.note}, ${r.by}, ${r.at})`;
}
/** Visible to the requester and the owner only. */
export async function referenceRequest(db: Db, id: string, accountId: string): Promise<ReferenceRequestRow | undefined> {
  const [row] = await db<ReferenceRequestRow[]>`
    select * from reference_requests where id = ${id} and (owner_account_id = ${accountId} or requester_account_id = ${accountId})`;
  return row;
}
export async function listReferenceRequests(db: Db, accountId: string, f: { role: 'owner' | 'requester'; state?: string; after?: string; limit: number }): Promise<ReferenceRequestRow[]> {
  const side = f.role === 'owner' ? db`owner_account_id = ${accountId}` : db`requester_account_id = ${accountId}`;
  return db<ReferenceRequestRow[]>`select * from reference_requests where ${side} and ${eq(db, 'state', f.state)} and ${after(db, f.after)} order by id limit ${f.limit + 1}`;
}

/**
 * The reconcile: every enrolled thing of the registrar's canonical model (owned by the registrar's
 * account) that matches an APPROVED request's filter gets a reference in the requester's
 * repository. Idempotent (unique per request and thing), so events, sweeps and nodes may repeat it.
 * Narrowed to one request and/or some things. Returns how many references it added.
 */
export async function reconcile(db: Db, only: { requestId?: string; thingIds?: string[] } = {}): Promise<number> {
  const rows = await db`
    insert into thing_references (account_id, thing_id, owner_account_id, reference_request_id, source)
    select r.requester_account_id, t.id, r.owner_account_id, r.id, 'reference_request'
    from reference_requests r
      join registrars g on g.id = r.registrar_id and g.state <> 'DELETED'
      join thing_directory t on t.model_id = g.canonical_model_id and t.account_id = r.owner_account_id
    where r.state = 'APPROVED' and t.enrolled_at is not null
      and ${only.requestId ? db`r.id = ${only.requestId}` : db`true`}
      and ${only.thingIds ? db`t.id = any(${db.array(only.thingIds)}::uuid[])` : db`true`}
      and (r.filter->>'serial_prefix' is null or starts_with(t.serial, r.filter->>'serial_prefix'))
      and (r.filter->>'manufacturer' is null or t.manufacturer = r.filter->>'manufacturer')
    -- the request and registrar rows locked while the references go in: a reconcile that runs beside a
    -- revoke (or a registrar delete) waits for it and sees the request revoked, instead of adding a
    -- reference after the revoke dropped them (seen as a flaky test under load)
    for share of r, g
    on conflict do nothing`;
  return rows.count;
}
export async function dropReferences(db: Db, requestId: string): Promise<number> {
  const rows = await db`delete from thing_references where reference_request_id = ${requestId}`;
  return rows.count;
}

export interface ThingReferenceRow {
  id: string; account_id: string; thing_id: string; owner_account_id: string; reference_request_id: string | null; device_deeplink_id: string | null;
  source: 'reference_request' | 'device_deeplink'; created_at: Date;
  model_id: string | null; manufacturer: string; model: string; serial: string; lifecycle_state: string; descriptor: string | null;
}
const referenceSelect = (db: Db) => db`
  select x.*, t.model_id, t.manufacturer, t.model, t.serial, t.lifecycle_state, m.vid || ':' || m.pid as descriptor
  from thing_references x join thing_directory t on t.id = x.thing_id left join model_directory m on m.id = t.model_id`;
export async function listThingReferences(db: Db, accountId: string, f: { requestId?: string; after?: string; limit: number }): Promise<ThingReferenceRow[]> {
  return db<ThingReferenceRow[]>`${referenceSelect(db)}
    where x.account_id = ${accountId} and ${eq(db, 'x.reference_request_id', f.requestId)} and ${after(db, f.after, 'x.id')} order by x.id limit ${f.limit + 1}`;
}
export async function thingReference(db: Db, id: string): Promise<ThingReferenceRow | undefined> {
  const [row] = await db<ThingReferenceRow[]>`${referenceSelect(db)} where x.id = ${id}`;
  return row;
}

// --- the reconcile sweep's cursor over domain_events ------------------------------------------
export async function cursor(db: Db, name: string): Promise<number> {
  const [row] = await db<{ seq: string }[]>`select seq from registry_cursors where name = ${name}`;
  return row ? Number(row.seq) : 0;
}
/**
 * thing.enrolled events after `from` (at most `limit`), and the seq the cursor may move to: the
 * last of them committed more than `settleSeconds` ago (a transaction may commit a lower seq after
 * a higher one; the window re-reads recent events, which the idempotent reconcile absorbs).
 */
export async function enrolledSince(db: Db, from: number, limit: number, settleSeconds: number, now: Date): Promise<{ thingIds: string[]; advanceTo: number }> {
  const rows = await db<{ seq: string; actor_id: string; settled: boolean }[]>`
    select seq, actor_id, created_at < ${new Date(now.getTime() - settleSeconds * 1000)} as settled
    from domain_events where seq > ${from} and type = 'thing.enrolled' and actor_type = 'thing' order by seq limit ${limit}`;
  let advanceTo = from;
  for (const r of rows) {
    if (!r.settled) break;
    advanceTo = Number(r.seq);
  }
  return { thingIds: [...new Set(rows.map((r) => r.actor_id))], advanceTo };
}
export async function setCursor(db: Db, name: string, seq: number): Promise<void> {
  await db`insert into registry_cursors (name, seq) values (${name}, ${seq}) on conflict (name) do update set seq = greatest(registry_cursors.seq, excluded.seq)`;
}

// --- device deeplinks -------------------------------------------------------------------------
export interface DeeplinkRow { id: string; account_id: string; thing_id: string; token_hash: Buffer; expires_at: Date; redemptions: number; created_by: string; created_at: Date }
export async function insertDeeplink(db: Db, d: { id: string; accountId: string; thingId: string; tokenHash: Buffer; expiresAt: Date; by: string; at: Date }): Promise<DeeplinkRow> {
  const [row] = await db<DeeplinkRow[]>`insert into device_deeplinks (id, account_id, thing_id, token_hash, expires_at, created_by, created_at)
    values (${d.id}, ${d.accountId}, ${d.thingId}, ${d.tokenHash}, ${d.expiresAt}, ${d.by}, ${d.at}) returning *`;
  return row;
}
export async function listDeeplinks(db: Db, accountId: string, f: { after?: string; limit: number }): Promise<DeeplinkRow[]> {
  return db<DeeplinkRow[]>`select * from device_deeplinks where account_id = ${accountId} and ${after(db, f.after)} order by id limit ${f.limit + 1}`;
}
export async function deleteDeeplink(db: Db, id: string, accountId: string): Promise<boolean> {
  const rows = await db`delete from device_deeplinks where id = ${id} and account_id = ${accountId}`;
  return rows.count === 1;
}
export async function deeplinkByHash(db: Db, hash: Buffer): Promise<DeeplinkRow | undefined> {
  const [row] = await db<DeeplinkRow[]>`select * from device_deeplinks where token_hash = ${hash} for update`;
  return row;
}
/** The redeemer's reference to the thing (one per account and thing); the existing one on a repeat. */
export async function referenceFromDeeplink(db: Db, d: DeeplinkRow, accountId: string): Promise<{ id: string; created: boolean }> {
  const [created] = await db<{ id: string }[]>`
    insert into thing_references (account_id, thing_id, owner_account_id, device_deeplink_id, source)
    values (${accountId}, ${d.thing_id}, ${d.account_id}, ${d.id}, 'device_deeplink') on conflict do nothing returning id`;
  if (created) {
    await db`update device_deeplinks set redemptions = redemptions + 1 where id = ${d.id}`;
    return { id: created.id, created: true };
  }
  const [existing] = await db<{ id: string }[]>`select id from thing_references where account_id = ${accountId} and thing_id = ${d.thing_id} and source = 'device_deeplink'`;
  return { id: existing.id, created: false };
}
export async function thingOwner(db: Db, thingId: string): Promise<string | undefined> {
  const [row] = await db<{ account_id: string }[]>`select account_id from thing_directory where id = ${thingId}`;
  return row?.account_id;
}
