import crypto from 'node:crypto';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { Sql } from '../db/client.js';
import { conflict, invalid, notFound } from '../lib/errors.js';
import { isUuid } from '../http/auth/principal.js';
import { repo, type LicenseApproval, type ModelRow, type ProvisioningMethod } from './repo.js';
import type { Sealer } from '../pki/sealer.js';
import type { ModelCreate } from './schemas.js';

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
}

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
 * Device models: just enough of /api/v1/models to carry the provisioning method and its settings
 * (the factory surface extends the table and this service). Secrets a method needs to recompute
 * an HMAC (symmetric group key, webhook secret) are sealed, and shown once at creation.
 */
export class ModelService {
  constructor(private readonly sql: Sql, private readonly sealer: Sealer) {}

  async create(accountId: string, input: ModelCreate, opts: { internal?: boolean } = {}): Promise<ModelView & { secret?: Record<string, string> }> {
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
    const row = await repo.insertModel(this.sql, {
      id: crypto.randomUUID(), account_id: accountId, vid: input.vid.toUpperCase(), pid: input.pid.toUpperCase(), name: input.name,
      internal: opts.internal ?? false, provisioning_method: input.provisioning_method, provisioning: settings,
      provisioning_secret: secretValue ? this.sealer.seal(secretValue) : null, license_approval: input.licenseApproval ?? 'automatic',
    });
    if (!row) throw conflict(`a model with descriptor ${input.vid.toUpperCase()}:${input.pid.toUpperCase()} already exists`);
    return { ...present(row), ...(secret ? { secret } : {}) };
  }

  async get(accountId: string, id: string): Promise<ModelView> {
    const row = await repo.modelById(this.sql, id);
    if (!row || row.account_id !== accountId) throw notFound(`model ${id} not found`);
    return present(row);
  }

  async list(accountId: string, limit: number, after?: string): Promise<{ items: ModelView[]; next_cursor: string | null }> {
    const rows = await repo.listModels(this.sql, accountId, limit, after);
    const items = rows.slice(0, limit).map(present);
    return { items, next_cursor: rows.length > limit ? items[items.length - 1].id : null };
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

export function present(row: ModelRow): ModelView {
  return {
    id: row.id, vid: row.vid, pid: row.pid, descriptor: `${row.vid}:${row.pid}`, name: row.name,
    provisioning_method: row.provisioning_method, provisioning: row.provisioning,
    licenseApproval: row.license_approval, created_at: row.created_at.toISOString(),
  };
}
