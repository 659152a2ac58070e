import type { Db } from '../db/client.js';

export interface ModelRow {
  id: string;
  account_id: string;
  vid: string;
  pid: string;
  name: string;
  internal: boolean;
  provisioning_method: ProvisioningMethod;
  provisioning: Record<string, unknown>;
  provisioning_secret: Buffer | null;
  license_approval: LicenseApproval;
  description: string;
  bundles: unknown[];
  created_at: Date;
  updated_at: Date;
}

export const LICENSE_APPROVALS = ['automatic', 'manual'] as const;
export type LicenseApproval = (typeof LICENSE_APPROVALS)[number];
export const LICENSE_STATUSES = ['pending', 'granted', 'denied'] as const;
export type LicenseStatus = (typeof LICENSE_STATUSES)[number];

/** One decision about a device license (a pending request is decided once, in place). */
export interface LicenseRow {
  id: string;
  thing_id: string;
  kind: 'request' | 'renew';
  decision: LicenseStatus;
  reason: string | null;
  features: string[];
  expires_at: Date | null;
  decided_by: string | null;
  decided_at: Date | null;
  created_at: Date;
}

export const PROVISIONING_METHODS = ['none', 'auto', 'symmetric_key', 'certificate', 'webhook', 'claim_token'] as const;
export type ProvisioningMethod = (typeof PROVISIONING_METHODS)[number];

export interface ThingRow {
  id: string;
  account_id: string;
  model_id: string | null;
  manufacturer: string;
  model: string;
  serial: string;
  metadata: Record<string, unknown>;
  enrolled_by: string | null;
  enrolled_at: Date | null;
  claim_group_id: string | null;
  enrollment_token_expires_at: Date | null;
  enrollment_token_used_at: Date | null;
  revoked_at: Date | null;
  created_at: Date;
}

export interface CertificateRow {
  serial: string;
  thing_id: string;
  pem: string;
  sealed_private_key: Buffer | null;
  not_after: Date;
  revoked: boolean;
  revoked_at: Date | null;
  /** a renewed certificate not used yet (src/trust/rotation.ts) */
  awaiting_first_use: boolean;
}

export interface ClaimContextRow {
  id: string | null;
  account_id: string | null;
  secret_hash: Buffer | null;
  /** the claimGroup machine's state (projection) */
  state: string | null;
  model_id: string | null;
  model_account_id: string | null;
  model_method: ProvisioningMethod | null;
  model_name: string;
  existing: string | null;
}

export interface Identity { accountId: string; manufacturer: string; model: string; serial: string }
/** One string per serial identity (tenant, manufacturer, model, serial). */
export const identityKey = (i: Identity): string => JSON.stringify([i.accountId, i.manufacturer, i.model, i.serial]);
/** The unique key of a thing's identity (index things_identity): concurrent registrations of one identity converge on it. */
export const THING_IDENTITY = ['account_id', 'manufacturer', 'model', 'serial'] as const;

/** SQL of the trust domain. Every function takes the pool or the caller's transaction. */
export const repo = {
  // --- models
  async insertModel(db: Db, m: Omit<ModelRow, 'created_at' | 'updated_at' | 'bundles'>): Promise<ModelRow | undefined> {
    const [row] = await db<ModelRow[]>`
      insert into models (id, account_id, vid, pid, name, description, internal, provisioning_method, provisioning, provisioning_secret, license_approval)
      values (${m.id}, ${m.account_id}, ${m.vid}, ${m.pid}, ${m.name}, ${m.description}, ${m.internal}, ${m.provisioning_method},
        ${db.json(m.provisioning as never)}, ${m.provisioning_secret}, ${m.license_approval})
      on conflict (vid, pid) do nothing returning *`;
    return row;
  },
  async modelById(db: Db, id: string): Promise<ModelRow | undefined> {
    const [row] = await db<ModelRow[]>`select * from models where id = ${id}`;
    return row;
  },
  async modelByDescriptor(db: Db, vid: string, pid: string): Promise<ModelRow | undefined> {
    const [row] = await db<ModelRow[]>`select * from models where vid = ${vid} and pid = ${pid}`;
    return row;
  },
  /** Own and imported models, never internal ones, by id (a keyset on a unique key: stable under inserts). */
  async listModels(db: Db, accountId: string, limit: number, after?: string): Promise<ModelRow[]> {
    // two index range scans (own: models_account; imported: model_imports' key), merged; the sets are disjoint
    const from = after ? db`m.id > ${after}` : db`true`;
    return db<ModelRow[]>`
      select * from (
        (select m.* from models m where m.account_id = ${accountId} and not m.internal and ${from} order by m.id limit ${limit + 1})
        union all
        (select m.* from model_imports i join models m on m.id = i.model_id
          where i.account_id = ${accountId} and not m.internal and ${from} order by m.id limit ${limit + 1})
      ) x order by id limit ${limit + 1}`;
  },
  async visibleModel(db: Db, accountId: string, id: string): Promise<ModelRow | undefined> {
    const [row] = await db<ModelRow[]>`
      select * from models m where id = ${id} and not internal
        and (account_id = ${accountId} or exists (select 1 from model_imports i where i.account_id = ${accountId} and i.model_id = m.id))`;
    return row;
  },
  async updateModel(db: Db, accountId: string, id: string, p: { name?: string; description?: string; license_approval?: LicenseApproval; bundles?: unknown[] }): Promise<ModelRow | undefined> {
    const [row] = await db<ModelRow[]>`
      update models set name = coalesce(${p.name ?? null}, name), description = coalesce(${p.description ?? null}, description),
        license_approval = coalesce(${p.license_approval ?? null}, license_approval),
        bundles = coalesce(${p.bundles ? db.json(p.bundles as never) : null}::jsonb, bundles), updated_at = now()
      where id = ${id} and account_id = ${accountId} and not internal returning *`;
    return row;
  },
  /** Throws the foreign-key violation (23503) while anything references the model. */
  async deleteModel(db: Db, accountId: string, id: string): Promise<boolean> {
    const rows = await db`delete from models where id = ${id} and account_id = ${accountId} and not internal`;
    return rows.count === 1;
  },
  /** Things of the model (other domains count their own references: ModelService.referencedBy). */
  async thingsOfModel(db: Db, id: string): Promise<number> {
    const [r] = await db<{ n: number }[]>`select count(*)::int as n from things where model_id = ${id}`;
    return r.n;
  },
  async insertShare(db: Db, s: { id: string; modelId: string; accountId: string; tokenHash: Buffer; expiresAt: Date; by: string }): Promise<void> {
    await db`insert into model_shares (id, model_id, account_id, token_hash, expires_at, created_by)
      values (${s.id}, ${s.modelId}, ${s.accountId}, ${s.tokenHash}, ${s.expiresAt}, ${s.by})`;
  },
  async shareByHash(db: Db, hash: Buffer): Promise<{ id: string; model_id: string; account_id: string; expires_at: Date } | undefined> {
    const [row] = await db<{ id: string; model_id: string; account_id: string; expires_at: Date }[]>`
      select id, model_id, account_id, expires_at from model_shares where token_hash = ${hash}`;
    return row;
  },
  /** false when the account imported the model before (concurrent imports: one wins) */
  async insertImport(db: Db, accountId: string, modelId: string, shareId: string): Promise<boolean> {
    const rows = await db`insert into model_imports (account_id, model_id, share_id) values (${accountId}, ${modelId}, ${shareId}) on conflict do nothing`;
    return rows.count === 1;
  },

  // --- things
  /**
   * A new thing's row without what its machines decide: the store inserts it with the thing's
   * projection (owner, enrollment, lifecycle: uow.createWithRows with THING_IDENTITY), the token's
   * columns projected after. The model and identity, and the registration's or claim's extras.
   */
  thingRow(db: Db, t: { modelId: string | null; manufacturer: string; model: string; serial: string; metadata?: Record<string, unknown>; tokenHash?: Buffer; claimGroupId?: string }): Record<string, unknown> {
    return {
      model_id: t.modelId, manufacturer: t.manufacturer, model: t.model, serial: t.serial,
      ...(t.metadata === undefined ? {} : { metadata: db.json(t.metadata as never) }),
      ...(t.tokenHash === undefined ? {} : { enrollment_token_hash: t.tokenHash }),
      ...(t.claimGroupId === undefined ? {} : { claim_group_id: t.claimGroupId }),
    };
  },
  async thing(db: Db, id: string): Promise<ThingRow | undefined> {
    const [row] = await db<ThingRow[]>`select * from things where id = ${id}`;
    return row;
  },
  /** The thing with its model's license approval mode ('automatic' without a model). */
  async thingWithApproval(db: Db, id: string): Promise<(ThingRow & { license_approval: LicenseApproval }) | undefined> {
    const [row] = await db<(ThingRow & { license_approval: LicenseApproval })[]>`
      select t.*, coalesce(m.license_approval, 'automatic') as license_approval
      from things t left join models m on m.id = t.model_id where t.id = ${id}`;
    return row;
  },
  async thingByIdentity(db: Db, i: Identity): Promise<ThingRow | undefined> {
    const [row] = await db<ThingRow[]>`
      select * from things where account_id = ${i.accountId} and manufacturer = ${i.manufacturer} and model = ${i.model} and serial = ${i.serial}`;
    return row;
  },
  async thingByToken(db: Db, hash: Buffer): Promise<ThingRow | undefined> {
    const [row] = await db<ThingRow[]>`select * from things where enrollment_token_hash = ${hash}`;
    return row;
  },

  // --- certificates: rows inserted here, their lifecycle columns projected by their actors (certificates.ts)
  async insertCertificate(db: Db, c: { serial: string; thingId: string; pem: string; sealedKey: Buffer | null; notAfter: Date }): Promise<void> {
    await db`
      insert into device_certificates (serial, thing_id, pem, sealed_private_key, not_after)
      values (${c.serial}, ${c.thingId}, ${c.pem}, ${c.sealedKey}, ${c.notAfter})`;
  },
  async currentCertificate(db: Db, thingId: string): Promise<CertificateRow | undefined> {
    const [row] = await db<CertificateRow[]>`
      select * from device_certificates where thing_id = ${thingId} order by created_at desc limit 1`;
    return row;
  },
  async certificate(db: Db, serial: string): Promise<CertificateRow | undefined> {
    const [row] = await db<CertificateRow[]>`select * from device_certificates where serial = ${serial}`;
    return row;
  },
  /** The thing's certificates not on the CRL (the projection: candidates for their machines' events). */
  async liveCertificates(db: Db, thingId: string): Promise<string[]> {
    const rows = await db<{ serial: string }[]>`select serial from device_certificates where thing_id = ${thingId} and not revoked order by created_at`;
    return rows.map((r) => r.serial);
  },
  /** The thing's certificates with their age by database time (rotation's renewal window). */
  async certificatesOf(db: Db, thingId: string): Promise<{ serial: string; pem: string; age_ms: number }[]> {
    const rows = await db<{ serial: string; pem: string; age_ms: number }[]>`
      select serial, pem, extract(epoch from now() - created_at) * 1000 as age_ms from device_certificates where thing_id = ${thingId}`;
    return rows.map((r) => ({ ...r, age_ms: Number(r.age_ms) }));
  },
  /** The thing's certificate of this serial (hex, no leading zeros) if it awaits its first use (the projection). */
  async awaitingFirstUse(db: Db, thingId: string, hex: string): Promise<string | undefined> {
    const [row] = await db<{ serial: string }[]>`
      select serial from device_certificates
      where thing_id = ${thingId} and awaiting_first_use and not revoked and ltrim(serial, '0') = ${hex}`;
    return row?.serial;
  },


  /**
   * Identities of `ids` already enrolled (committed): the identity keys (JSON of account, manufacturer,
   * model, serial) that are taken.
   */
  async takenIdentities(db: Db, ids: Identity[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const input = ids.map((i) => ({ account_id: i.accountId, manufacturer: i.manufacturer, model: i.model, serial: i.serial }));
    const rows = await db<{ account_id: string; manufacturer: string; model: string; serial: string }[]>`
      select t.account_id, t.manufacturer, t.model, t.serial
      from jsonb_to_recordset(${db.json(input as never)}::jsonb) as x(account_id uuid, manufacturer text, model text, serial text)
        join things t on t.account_id = x.account_id and t.manufacturer = x.manufacturer and t.model = x.model and t.serial = x.serial`;
    return new Set(rows.map((r) => identityKey({ accountId: r.account_id, manufacturer: r.manufacturer, model: r.model, serial: r.serial })));
  },

  /** Batch form of insertCertificate: the certificates of the things a claim batch enrolled, in one statement. */
  async insertCertificates(db: Db, certs: { serial: string; thingId: string; pem: string; sealedKey: Buffer | null; notAfter: Date }[]): Promise<void> {
    if (certs.length === 0) return;
    const input = certs.map((c) => ({ serial: c.serial, thing_id: c.thingId, pem: c.pem, sealed: c.sealedKey?.toString('base64') ?? null, not_after: c.notAfter.toISOString() }));
    await db`
      insert into device_certificates (serial, thing_id, pem, sealed_private_key, not_after)
      select x.serial, x.thing_id, x.pem, decode(x.sealed, 'base64'), x.not_after
      from jsonb_to_recordset(${db.json(input as never)}::jsonb) as x(serial text, thing_id uuid, pem text, sealed text, not_after timestamptz)`;
  },

  // --- claim groups
  /**
   * The claim query, for several claims in one statement (concurrent claims: src/trust/claimLookups.ts):
   * per claim, the group of its secret (if any) with its state (projection), the model the device
   * names (if registered) and an existing thing of the tuple in the group's account; in the order given.
   * One statement text whatever the number of claims (its plan is cached); each lookup is a
   * lateral subquery with a limit, so it stays an index lookup per claim (never a join over a whole
   * table), and the thing's is ordered by the identity's unique index, which the planner then takes
   * even before the table has statistics.
   */
  async claimContexts(db: Db, items: { hash: Buffer; ref: { vid?: string; pid?: string; id?: string; name: string }; device: { manufacturer: string; serial: string } }[]): Promise<ClaimContextRow[]> {
    const input = items.map(({ hash, ref, device }, n) => ({
      n, hash: hash.toString('hex'), vid: ref.vid && ref.pid ? ref.vid : null, pid: ref.vid && ref.pid ? ref.pid : null,
      model_id: ref.vid && ref.pid ? null : ref.id ?? null, name: ref.name, manufacturer: device.manufacturer, serial: device.serial,
    }));
    const rows = await db<(ClaimContextRow & { n: number })[]>`
      select x.n, g.id, g.account_id, g.secret_hash, g.state,
        m.id as model_id, m.account_id as model_account_id, m.provisioning_method as model_method,
        coalesce(m.vid || ':' || m.pid, x.name) as model_name, t.id as existing
      from jsonb_to_recordset(${db.json(input as never)}::jsonb) as x(n int, hash text, vid text, pid text, model_id uuid, name text, manufacturer text, serial text)
        left join lateral (select id, account_id, secret_hash, state from claim_groups where secret_hash = decode(x.hash, 'hex') limit 1) g on true
        left join lateral (
          (select id, account_id, provisioning_method, vid, pid from models where vid = x.vid and pid = x.pid limit 1)
          union all
          (select id, account_id, provisioning_method, vid, pid from models where id = x.model_id limit 1)
          limit 1) m on true
        left join lateral (
          select t.id from things t where t.account_id = g.account_id and t.manufacturer = x.manufacturer
            and t.model = coalesce(m.vid || ':' || m.pid, x.name) and t.serial = x.serial
          order by t.account_id, t.manufacturer, t.model, t.serial limit 1) t on true
      order by x.n`;
    return rows.map(({ n: _n, ...row }) => row);
  },
  async insertClaimGroup(db: Db, g: { id: string; accountId: string; secretHash: Buffer }): Promise<void> {
    await db`insert into claim_groups (id, account_id, secret_hash) values (${g.id}, ${g.accountId}, ${g.secretHash})`;
  },
  async claimGroupAccount(db: Db, id: string): Promise<string | undefined> {
    const [row] = await db<{ account_id: string }[]>`select account_id from claim_groups where id = ${id}`;
    return row?.account_id;
  },
  /** Groups whose TTL may have passed at `at` (the machine decides, one EXPIRE each). */
  async claimGroupsDue(db: Db, at: string, limit: number): Promise<string[]> {
    const rows = await db<{ id: string }[]>`
      select id from claim_groups where state in ('active', 'capped') and expires_at <= ${at} order by expires_at limit ${limit}`;
    return rows.map((r) => r.id);
  },

  // --- licenses: the row holds the request; its decision is the license actor's (projected in the same unit of work)
  async insertLicense(db: Db, l: { id: string; thingId: string; kind: 'request' | 'renew'; features: string[] }): Promise<void> {
    await db`insert into device_licenses (id, thing_id, kind, features) values (${l.id}, ${l.thingId}, ${l.kind}, ${db.json(l.features as never)})`;
  },
  async license(db: Db, id: string): Promise<LicenseRow | undefined> {
    const [row] = await db<LicenseRow[]>`select * from device_licenses where id = ${id}`;
    return row;
  },
  async pendingLicenseOf(db: Db, thingId: string): Promise<string | undefined> {
    const [row] = await db<{ id: string }[]>`select id from device_licenses where thing_id = ${thingId} and decision = 'pending'`;
    return row?.id;
  },
  /** The license's account is its thing's (a license follows its thing to another account). */
  async licenseWithAccount(db: Db, id: string): Promise<(LicenseRow & { account_id: string }) | undefined> {
    const [row] = await db<(LicenseRow & { account_id: string })[]>`
      select l.*, t.account_id from device_licenses l join things t on t.id = l.thing_id where l.id = ${id}`;
    return row;
  },
  /** Keyset page (by id) of the licenses of the account's things; one row more than `limit` says there is a next page. */
  async listLicenses(db: Db, accountId: string, q: { status?: LicenseStatus; limit: number; after?: string }): Promise<LicenseRow[]> {
    return db<LicenseRow[]>`
      select l.* from device_licenses l join things t on t.id = l.thing_id
      where t.account_id = ${accountId}
        and ${q.status ? db`l.decision = ${q.status}` : db`true`}
        and ${q.after ? db`l.id > ${q.after}` : db`true`}
      order by l.id limit ${q.limit + 1}`;
  },

  // --- access codes (join): the row, then its accessCode actor (its use is the machine's, projected)
  async insertAccessCode(db: Db, c: { id: string; hash: Buffer; thingId: string; accountId: string; expiresAt: Date }): Promise<void> {
    await db`insert into thing_access_codes (id, code_hash, thing_id, issued_by_account, expires_at)
      values (${c.id}, ${c.hash}, ${c.thingId}, ${c.accountId}, ${c.expiresAt})`;
  },
  async accessCodeId(db: Db, hash: Buffer): Promise<string | undefined> {
    const [row] = await db<{ id: string }[]>`select id from thing_access_codes where code_hash = ${hash}`;
    return row?.id;
  },
};
