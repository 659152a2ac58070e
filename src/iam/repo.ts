import type { Db } from '../db/client.js';
import type { ScpDocument } from './policy.js';

/** SQL of the IAM domain. Functions take `Db` (pool or transaction): the service decides. */

export interface CredentialRow {
  id: string;
  account_id: string;
  access_key_id: string;
  kind: 'static' | 'temporary';
  secret_hash: Buffer;
  session_token_hash: Buffer | null;
  /** static: the machine's projection (ACTIVE | INACTIVE); temporary: null (see revoked_at) */
  status: 'ACTIVE' | 'INACTIVE' | null;
  principal_id: string;
  principal_type: 'user' | 'federated';
  realm: string;
  description: string;
  created_at: Date;
  expires_at: Date | null;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

const CRED_COLUMNS = 'id, account_id, access_key_id, kind, secret_hash, session_token_hash, status, principal_id, principal_type, realm, description, created_at, expires_at, last_used_at, revoked_at';

export async function credentialByAccessKey(db: Db, accessKeyId: string): Promise<CredentialRow | undefined> {
  const [row] = await db.unsafe<CredentialRow[]>(`select ${CRED_COLUMNS} from iam_credentials where access_key_id = $1`, [accessKeyId]);
  return row;
}

export type NewCredential = Omit<CredentialRow, 'status' | 'created_at' | 'last_used_at' | 'expires_at' | 'revoked_at'> & { created_at: string; expires_at: string | null };

/** Inserts the row; `status` is left to the static credential machine's projection (null for temporary ones). */
export async function insertCredential(db: Db, c: NewCredential): Promise<void> {
  await db.unsafe(
    `insert into iam_credentials (id, account_id, access_key_id, kind, secret_hash, session_token_hash, principal_id, principal_type, realm, description, created_at, expires_at, last_used_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, case when $4::text = 'temporary' then $11::timestamptz end)`,
    [c.id, c.account_id, c.access_key_id, c.kind, c.secret_hash, c.session_token_hash, c.principal_id, c.principal_type, c.realm, c.description, c.created_at, c.expires_at] as never[],
  );
}

/** Serializes creations for one user in one account (the 2-credential limit under concurrency). */
export async function lockPrincipal(db: Db, accountId: string, principalId: string): Promise<void> {
  await db`select pg_advisory_xact_lock(hashtextextended(${'iam-cred:' + accountId + ':' + principalId}, 0))`;
}

export async function countStatic(db: Db, accountId: string, principalId: string): Promise<number> {
  const [row] = await db<{ n: number }[]>`
    select count(*)::int as n from iam_credentials where account_id = ${accountId} and principal_id = ${principalId} and kind = 'static'`;
  return row.n;
}

export async function staticCredential(db: Db, accountId: string, id: string, lock = false): Promise<CredentialRow | undefined> {
  const [row] = await db.unsafe<CredentialRow[]>(
    `select ${CRED_COLUMNS} from iam_credentials where id = $1 and account_id = $2 and kind = 'static'${lock ? ' for update' : ''}`, [id, accountId]);
  return row;
}

export async function listStatic(db: Db, accountId: string, principalId?: string): Promise<CredentialRow[]> {
  return db.unsafe<CredentialRow[]>(
    `select ${CRED_COLUMNS} from iam_credentials where account_id = $1 and kind = 'static' and ($2::text is null or principal_id = $2) order by created_at, id`,
    [accountId, principalId ?? null]);
}

/** Sets the description when one is given; answers the row (its status as the machine projected it). */
export async function describeStatic(db: Db, id: string, description: string | undefined): Promise<CredentialRow> {
  const [row] = await db.unsafe<CredentialRow[]>(
    `update iam_credentials set description = coalesce($2, description) where id = $1 returning ${CRED_COLUMNS}`, [id, description ?? null]);
  return row;
}

export async function deleteCredential(db: Db, id: string): Promise<void> {
  await db`delete from iam_credentials where id = ${id}`;
}

/** The caller's sessions that are neither revoked nor expired at `now`. */
export async function listSessions(db: Db, accountId: string, realm: string, principalId: string, now: Date): Promise<CredentialRow[]> {
  return db.unsafe<CredentialRow[]>(
    `select ${CRED_COLUMNS} from iam_credentials
     where account_id = $1 and realm = $2 and principal_id = $3 and kind = 'temporary' and revoked_at is null and expires_at > $4
     order by created_at, id`, [accountId, realm, principalId, now] as never[]);
}

/** Marks the caller's live sessions revoked at `now` (one when `accessKeyId` is given); returns their keys. */
export async function revokeSessions(db: Db, now: Date, accountId: string, realm: string, principalId: string, accessKeyId?: string): Promise<string[]> {
  const rows = await db.unsafe<{ access_key_id: string }[]>(
    `update iam_credentials set revoked_at = $1
     where account_id = $2 and realm = $3 and principal_id = $4 and kind = 'temporary' and revoked_at is null and expires_at > $1
       and ($5::text is null or access_key_id = $5)
     returning access_key_id`, [now, accountId, realm, principalId, accessKeyId ?? null] as never[]);
  return rows.map((r) => r.access_key_id);
}

export async function deleteExpiredTemporary(db: Db, now: Date): Promise<string[]> {
  const rows = await db<{ access_key_id: string }[]>`
    delete from iam_credentials where kind = 'temporary' and expires_at <= ${now} returning access_key_id`;
  return rows.map((r) => r.access_key_id);
}

/** Batched `last_used_at` (never moves backwards). */
export async function touchCredentials(db: Db, keys: string[], times: string[]): Promise<void> {
  if (keys.length === 0) return;
  await db`
    update iam_credentials c set last_used_at = v.t
    from (select unnest(${keys}::text[]) as k, unnest(${times}::text[])::timestamptz as t) v
    where c.access_key_id = v.k and (c.last_used_at is null or c.last_used_at < v.t)`;
}

// --- roles asserted by the identity provider ------------------------------------------------

export async function principalRoles(db: Db, accountId: string, principalId: string): Promise<string[] | undefined> {
  const [row] = await db<{ roles: string[] }[]>`select roles from iam_principal_roles where account_id = ${accountId} and principal_id = ${principalId}`;
  return row?.roles;
}

export async function recordPrincipalRoles(db: Db, accountId: string, principalId: string, roles: string[]): Promise<boolean> {
  const res = await db`
    insert into iam_principal_roles (account_id, principal_id, roles) values (${accountId}, ${principalId}, ${roles}::text[])
    on conflict (account_id, principal_id) do update set roles = excluded.roles, updated_at = now()
    where iam_principal_roles.roles is distinct from excluded.roles`;
  return res.count > 0;
}

// --- roles an account admin assigned to a tenant IAM user (for its static keys) ---------------

export interface AssignedRolesRow { roles: string[]; updated_at: Date; assigned_by: string }

export async function assignedRoles(db: Db, accountId: string, principalId: string): Promise<AssignedRolesRow | undefined> {
  const [row] = await db<AssignedRolesRow[]>`
    select roles, updated_at, assigned_by from iam_assigned_roles where account_id = ${accountId} and principal_id = ${principalId}`;
  return row;
}

/** Sets the assigned roles (non-empty) and answers the row. */
export async function putAssignedRoles(db: Db, a: { accountId: string; principalId: string; roles: string[]; by: string }): Promise<AssignedRolesRow> {
  const [row] = await db<AssignedRolesRow[]>`
    insert into iam_assigned_roles (account_id, principal_id, roles, assigned_by)
    values (${a.accountId}, ${a.principalId}, ${a.roles}::text[], ${a.by})
    on conflict (account_id, principal_id) do update set roles = excluded.roles, updated_at = now(), assigned_by = excluded.assigned_by
    returning roles, updated_at, assigned_by`;
  return row;
}

export async function deleteAssignedRoles(db: Db, accountId: string, principalId: string): Promise<boolean> {
  const res = await db`delete from iam_assigned_roles where account_id = ${accountId} and principal_id = ${principalId}`;
  return res.count > 0;
}

// --- identity-center assignments ------------------------------------------------------------

export interface AssignmentRow {
  account_id: string;
  realm: string;
  principal_id: string;
  roles: string[];
  created_at: Date;
  updated_at: Date;
  assigned_by: string | null;
}

export async function assignment(db: Db, realm: string, principalId: string, accountId: string): Promise<AssignmentRow | undefined> {
  const [row] = await db<AssignmentRow[]>`
    select account_id, realm, principal_id, roles, created_at, updated_at, assigned_by from iam_account_assignments
    where realm = ${realm} and principal_id = ${principalId} and account_id = ${accountId}`;
  return row;
}

export async function upsertAssignment(db: Db, a: { accountId: string; realm: string; principalId: string; roles: string[]; by: string }): Promise<{ row: AssignmentRow; created: boolean }> {
  const [row] = await db<(AssignmentRow & { inserted: boolean })[]>`
    insert into iam_account_assignments (account_id, realm, principal_id, roles, assigned_by)
    values (${a.accountId}, ${a.realm}, ${a.principalId}, ${a.roles}::text[], ${a.by})
    on conflict (realm, principal_id, account_id) do update set roles = excluded.roles, updated_at = now(), assigned_by = excluded.assigned_by
    returning account_id, realm, principal_id, roles, created_at, updated_at, assigned_by, (xmax = 0) as inserted`;
  const { inserted, ...rest } = row;
  return { row: rest, created: inserted };
}

export async function listAssignments(db: Db, accountId: string): Promise<AssignmentRow[]> {
  return db<AssignmentRow[]>`
    select account_id, realm, principal_id, roles, created_at, updated_at, assigned_by from iam_account_assignments
    where account_id = ${accountId} order by realm, principal_id`;
}

export async function deleteAssignment(db: Db, accountId: string, realm: string, principalId: string): Promise<boolean> {
  const res = await db`delete from iam_account_assignments where account_id = ${accountId} and realm = ${realm} and principal_id = ${principalId}`;
  return res.count > 0;
}

// --- capabilities -----------------------------------------------------------------------------

export interface CapabilityRow { capability: string; granted_at: Date; granted_by: string | null }

export async function capabilities(db: Db, accountId: string): Promise<CapabilityRow[]> {
  return db<CapabilityRow[]>`select capability, granted_at, granted_by from account_capabilities where account_id = ${accountId} order by capability`;
}

export async function grantCapability(db: Db, accountId: string, capability: string, by: string): Promise<void> {
  await db`insert into account_capabilities (account_id, capability, granted_by) values (${accountId}, ${capability}, ${by}) on conflict do nothing`;
}

export async function revokeCapability(db: Db, accountId: string, capability: string): Promise<boolean> {
  const res = await db`delete from account_capabilities where account_id = ${accountId} and capability = ${capability}`;
  return res.count > 0;
}

// --- service control policies -----------------------------------------------------------------

export interface ScpRow {
  id: string;
  name: string;
  description: string;
  document: ScpDocument;
  document_size: number;
  created_at: Date;
  created_by: string | null;
}

export async function insertScp(db: Db, s: { id: string; name: string; description: string; document: ScpDocument; size: number; by: string }): Promise<ScpRow | undefined> {
  const [row] = await db<ScpRow[]>`
    insert into iam_scps (id, name, description, document, document_size, created_by)
    values (${s.id}, ${s.name}, ${s.description}, ${db.json(s.document as never)}, ${s.size}, ${s.by})
    on conflict (name) do nothing
    returning id, name, description, document, document_size, created_at, created_by`;
  return row;
}

export async function scp(db: Db, id: string, lock = false): Promise<ScpRow | undefined> {
  const [row] = await db.unsafe<ScpRow[]>(
    `select id, name, description, document, document_size, created_at, created_by from iam_scps where id = $1${lock ? ' for share' : ''}`, [id]);
  return row;
}

export async function listScps(db: Db): Promise<ScpRow[]> {
  return db<ScpRow[]>`select id, name, description, document, document_size, created_at, created_by from iam_scps order by name`;
}

export async function deleteScp(db: Db, id: string): Promise<'deleted' | 'absent' | 'attached'> {
  const [att] = await db`select 1 from iam_scp_attachments where scp_id = ${id} limit 1`;
  if (att) return 'attached';
  const res = await db`delete from iam_scps where id = ${id}`;
  return res.count > 0 ? 'deleted' : 'absent';
}

export async function lockAccountScps(db: Db, accountId: string): Promise<void> {
  await db`select pg_advisory_xact_lock(hashtextextended(${'iam-scp:' + accountId}, 0))`;
}

export async function attachedScps(db: Db, accountId: string): Promise<(ScpRow & { attached_at: Date; attached_by: string | null })[]> {
  return db<(ScpRow & { attached_at: Date; attached_by: string | null })[]>`
    select s.id, s.name, s.description, s.document, s.document_size, s.created_at, s.created_by, a.attached_at, a.attached_by
    from iam_scp_attachments a join iam_scps s on s.id = a.scp_id
    where a.account_id = ${accountId} order by a.attached_at, s.id`;
}

export async function attachScp(db: Db, accountId: string, scpId: string, by: string): Promise<boolean> {
  const res = await db`insert into iam_scp_attachments (scp_id, account_id, attached_by) values (${scpId}, ${accountId}, ${by}) on conflict do nothing`;
  return res.count > 0;
}

export async function detachScp(db: Db, accountId: string, scpId: string): Promise<boolean> {
  const res = await db`delete from iam_scp_attachments where account_id = ${accountId} and scp_id = ${scpId}`;
  return res.count > 0;
}

// --- node registry for acknowledged invalidation ------------------------------------------------

/** Marks the node live and answers the current cache generation. */
export async function heartbeat(db: Db, nodeId: string): Promise<number> {
  const [row] = await db<{ n: number }[]>`
    with hb as (
      insert into iam_cache_nodes (node_id, seen_at) values (${nodeId}, now())
      on conflict (node_id) do update set seen_at = now()
    )
    select n from iam_cache_generation`;
  return row.n;
}

export async function bumpGeneration(db: Db): Promise<number> {
  const [row] = await db<{ n: number }[]>`update iam_cache_generation set n = n + 1 returning n`;
  return row.n;
}

export async function liveNodes(db: Db, exceptNode: string, withinSeconds: number): Promise<string[]> {
  const rows = await db<{ node_id: string }[]>`
    select node_id from iam_cache_nodes where node_id <> ${exceptNode} and seen_at > now() - make_interval(secs => ${withinSeconds})`;
  return rows.map((r) => r.node_id);
}

export async function forgetNode(db: Db, nodeId: string): Promise<void> {
  await db`delete from iam_cache_nodes where node_id = ${nodeId}`;
}
