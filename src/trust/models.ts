import crypto from 'node:crypto';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { Sql } from '../db/client.js';
import { conflict, DomainError, invalid, notFound } from '../lib/errors.js';
import { iso, newSecret, sha256 } from '../lib/encoding.js';
import { tokenOf } from '../lib/deeplinks.js';
import { isUuid } from '../http/auth/principal.js';
import { repo, type LicenseApproval, type ModelRow, type ProvisioningMethod } from './repo.js';
import type { Sealer } from '../pki/sealer.js';
import type { ModelCreate } from './schemas.js';
import type { Bundle, ModelPatch } from './modelSchemas.js';

export interface ModelView {
  id: string;
  vid: string;
  pid: string;
  descriptor: string;
  name: string;
  provisioning_method: ProvisioningMethod;
  provisioning: Record<string, unknown>;
  licenseApproval: LicenseApproval;
  created_at: string;
  description: string;
  owner_account_id: string;
  imported: boolean;
}

/**
 * Where an account's VID namespace comes from (the registry domain's vendors, plugged in at its
 * init: trust comes before it in src/domains.ts). Without it models are not bound to a namespace.
 */
export interface VendorNamespaces {
  /** the account's assigned VID */
  vidOf(accountId: string): Promise<string | undefined>;
  /** the account a VID is assigned to */
  holderOf(vid: string): Promise<string | undefined>;
}

/** Share deeplinks: `msh_` + 256 bits; live 7 days unless asked otherwise. */
const SHARE_PREFIX = 'msh_';
const SHARE_TTL_SECONDS = 7 * 24 * 3600;
const FK_VIOLATION = '23503';

/** Other domains' rows that reference models (see ModelService.referencedBy). */
export type ModelHolder = 'factory_services' | 'registrars';

/** `FFF1:8001` (any case) -> { vid: 'FFF1', pid: '8001' } */
export function parseDescriptor(value: string): { vid: string; pid: string } | undefined {
  const m = /^([0-9a-f]{4}):([0-9a-f]{4})$/i.exec(value.trim());
  return m ? { vid: m[1].toUpperCase(), pid: m[2].toUpperCase() } : undefined;
}

/** http:// only to loopback (development, tests); everything else must be https://. */
export function approvalUrlAllowed(raw: string): boolean {
  const url = new URL(raw);
  if (url.protocol === 'https:') return true;
  return url.protocol === 'http:' && ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname);
}

/**
 * Device models (/api/v1/models): vid:pid descriptors in the accounts' vendor namespaces with
 * their provisioning method, description and software/driver bundles; shared by deeplink to
 * other accounts, which import the public descriptor (read-only, no provisioning settings).
 * Internal models (platform operators) resolve for provisioning and are never listed. Secrets a
 * method needs to recompute an HMAC (symmetric group key, webhook secret) are sealed, and shown
 * once at creation.
 */
export class ModelService {
  private readonly holders = new Map<ModelHolder, (modelId: string) => Promise<number>>();
  constructor(private readonly sql: Sql, private readonly sealer: Sealer, private readonly vendors: VendorNamespaces, private readonly publicBaseUrl = 'http://localhost') {}

  /**
   * How another domain counts its rows that reference a model (called once at init by the domain
   * that owns them: factory services, registrars): the 409 of a delete says what holds the model,
   * and trust reads no other domain's tables.
   */
  referencedBy(holder: ModelHolder, count: (modelId: string) => Promise<number>): void {
    this.holders.set(holder, count);
  }

  /**
   * The VID of a new model: the account's own VID by default (404 without a namespace); a VID sent
   * must not be another account's namespace (409). VIDs no account holds (test VIDs FFF1-FFF4,
   * VIDs of models made before vendors existed) stay usable. Internal models take any VID.
   */
  private async vidFor(accountId: string, requested: string | undefined, internal: boolean): Promise<string> {
    if (internal) {
      if (!requested) throw invalid('vid is required for an internal model');
      return requested.toUpperCase();
    }
    const own = await this.vendors.vidOf(accountId);
    if (!requested) {
      if (!own) throw notFound('your account has no vendor namespace: POST /api/v1/vendors first, or send vid');
      return own;
    }
    const vid = requested.toUpperCase();
    if (vid === own) return vid;
    const holder = await this.vendors.holderOf(vid);
    if (holder && holder !== accountId) throw conflict(`VID ${vid} is the namespace of another vendor; use your own VID${own ? ` ${own}` : ''}`);
    return vid;
  }

  async create(accountId: string, input: ModelCreate, opts: { internal?: boolean } = {}): Promise<ModelView & { secret?: Record<string, string> }> {
    const vid = await this.vidFor(accountId, input.vid, opts.internal ?? false);
    const settings: Record<string, unknown> = { ...(input.provisioning ?? {}) };
    let secret: Record<string, string> | undefined;
    switch (input.provisioning_method) {
      case 'auto': {
        const pattern = settings.serialPattern as string | undefined;
        if (pattern !== undefined) {
          try { new RegExp(pattern); } catch { throw invalid(`provisioning.serialPattern is not a valid regular expression`); }
        }
        break;
      }
      case 'symmetric_key': {
        const groupKey = (settings.groupKey as string | undefined) ?? crypto.randomBytes(32).toString('base64');
        if (Buffer.from(groupKey, 'base64').length < 32) throw invalid('provisioning.groupKey must be base64 of at least 32 bytes');
        delete settings.groupKey;
        secret = { groupKey };
        break;
      }
      case 'certificate': {
        const pem = settings.manufacturerCaPem as string;
        let ca: x509.X509Certificate;
        try { ca = new x509.X509Certificate(pem); } catch { throw invalid('provisioning.manufacturerCaPem is not a PEM certificate'); }
        settings.manufacturerCaSubject = ca.subject;
        break;
      }
      case 'webhook': {
        if (!approvalUrlAllowed(settings.approvalUrl as string)) throw invalid('provisioning.approvalUrl must use https:// (http:// only to loopback)');
        secret = { webhookSecret: 'whsec_' + crypto.randomBytes(32).toString('base64') };
        break;
      }
      default:
        break;
    }
    const secretValue = secret ? Object.values(secret)[0] : undefined;
    let row: ModelRow | undefined;
    try {
      row = await repo.insertModel(this.sql, {
        id: crypto.randomUUID(), account_id: accountId, vid, pid: input.pid.toUpperCase(), name: input.name, description: input.description ?? '',
        internal: opts.internal ?? false, provisioning_method: input.provisioning_method, provisioning: settings,
        provisioning_secret: secretValue ? this.sealer.seal(secretValue) : null, license_approval: input.licenseApproval ?? 'automatic',
      });
    } catch (err) {
      if ((err as { code?: string }).code === FK_VIOLATION) throw notFound(`account ${accountId} not found`);
      throw err;
    }
    if (!row) throw conflict(`a model with descriptor ${vid}:${input.pid.toUpperCase()} already exists`);
    return { ...present(row), ...(secret ? { secret } : {}) };
  }

  /** The account's model, or one it imported (public descriptor only); internal models are not visible. */
  async get(accountId: string, id: string): Promise<ModelView> {
    const row = await repo.visibleModel(this.sql, accountId, id);
    if (!row) throw notFound(`model ${id} not found`);
    return present(row, accountId);
  }

  /** Keyset pages by id over the account's own and imported models (never internal ones). */
  async list(accountId: string, limit: number, after?: string): Promise<{ items: ModelView[]; next_cursor: string | null }> {
    const rows = await repo.listModels(this.sql, accountId, limit, after);
    const items = rows.slice(0, limit).map((r) => present(r, accountId));
    return { items, next_cursor: rows.length > limit ? items[items.length - 1].id : null };
  }

  /** The owner's model (imports are read-only): 404 otherwise. */
  private async own(accountId: string, id: string): Promise<ModelRow> {
    const row = await repo.modelById(this.sql, id);
    if (!row || row.account_id !== accountId || row.internal) throw notFound(`model ${id} not found`);
    return row;
  }

  async update(accountId: string, id: string, patch: ModelPatch): Promise<ModelView> {
    await this.own(accountId, id);
    const row = await repo.updateModel(this.sql, accountId, id, {
      name: patch.name, description: patch.description, license_approval: patch.licenseApproval, bundles: patch.bundles,
    });
    if (!row) throw notFound(`model ${id} not found`);
    return present(row, accountId);
  }

  /**
   * Deletes a model no thing, factory service, provisioning run or registrar references (409
   * otherwise; the foreign keys decide, so a thing enrolled concurrently wins over the delete).
   */
  async delete(accountId: string, id: string): Promise<void> {
    await this.own(accountId, id);
    try {
      const deleted = await repo.deleteModel(this.sql, accountId, id);
      if (!deleted) throw notFound(`model ${id} not found`);
    } catch (err) {
      if (err instanceof DomainError || (err as { code?: string }).code !== FK_VIOLATION) throw err;
      const [things, factoryServices, registrars] = await Promise.all([
        repo.thingsOfModel(this.sql, id), this.holders.get('factory_services')?.(id) ?? 0, this.holders.get('registrars')?.(id) ?? 0,
      ]);
      const uses = { things, factoryServices, registrars };
      throw conflict(`model ${id} is in use (${uses.things} thing(s), ${uses.factoryServices} factory service(s), ${uses.registrars} registrar(s)); delete or move them first`, {
        extra: { things: uses.things, factory_services: uses.factoryServices, registrars: uses.registrars },
      });
    }
  }

  /** A share deeplink to the public descriptor (the token is shown once, stored as SHA-256). */
  async share(accountId: string, id: string, by: string, expiresInSeconds = SHARE_TTL_SECONDS, now = new Date()) {
    const row = await this.own(accountId, id);
    const token = newSecret(SHARE_PREFIX);
    const shareId = crypto.randomUUID();
    const expiresAt = new Date(now.getTime() + expiresInSeconds * 1000);
    await repo.insertShare(this.sql, { id: shareId, modelId: id, accountId, tokenHash: sha256(token), expiresAt, by });
    return { id: shareId, model_id: id, descriptor: `${row.vid}:${row.pid}`, token, url: `${this.publicBaseUrl}/links/model#${token}`, expires_at: expiresAt.toISOString() };
  }

  /** Imports a shared descriptor: 400 malformed or expired, 404 unknown, 409 already imported or the account's own. */
  async import(accountId: string, input: { deeplink?: string; token?: string }, now = new Date()): Promise<ModelView> {
    const token = tokenOf(input, SHARE_PREFIX, 'model');
    const share = await repo.shareByHash(this.sql, sha256(token));
    if (!share) throw notFound('no model share has this token');
    if (share.expires_at <= now) throw invalid(`this share deeplink expired at ${iso(share.expires_at)}`);
    if (share.account_id === accountId) throw conflict(`model ${share.model_id} is your account's own`);
    if (!(await repo.insertImport(this.sql, accountId, share.model_id, share.id))) throw conflict(`model ${share.model_id} is already imported`);
    return this.get(accountId, share.model_id);
  }

  async software(accountId: string, id: string): Promise<{ model_id: string; descriptor: string; bundles: Bundle[] }> {
    const row = await repo.visibleModel(this.sql, accountId, id);
    if (!row) throw notFound(`model ${id} not found`);
    return { model_id: row.id, descriptor: `${row.vid}:${row.pid}`, bundles: row.bundles as Bundle[] };
  }

  /** Whether the account owns this model (its own, internal ones included; not one it imported). */
  async isOwnedBy(accountId: string, modelId: string): Promise<boolean> {
    const row = await repo.modelById(this.sql, modelId);
    return row?.account_id === accountId;
  }

  /** What a device names at enrollment: the `vid:pid` descriptor, or the model's id. */
  async resolve(reference: string): Promise<ModelRow | undefined> {
    const d = parseDescriptor(reference);
    if (d) return repo.modelByDescriptor(this.sql, d.vid, d.pid);
    return isUuid(reference) ? repo.modelById(this.sql, reference.toLowerCase()) : undefined;
  }

  secretOf(model: ModelRow): string {
    if (!model.provisioning_secret) throw new Error(`model ${model.id} has no sealed secret`);
    return this.sealer.open(model.provisioning_secret);
  }
}

/** `viewer`: the account reading; an imported model shows its public descriptor only (no provisioning settings). */
export function present(row: ModelRow, viewer = row.account_id): ModelView {
  const imported = row.account_id !== viewer;
  return {
    id: row.id, vid: row.vid, pid: row.pid, descriptor: `${row.vid}:${row.pid}`, name: row.name,
    provisioning_method: row.provisioning_method, provisioning: imported ? {} : row.provisioning,
    licenseApproval: row.license_approval, created_at: row.created_at.toISOString(),
    description: row.description, owner_account_id: row.account_id, imported,
  };
}
