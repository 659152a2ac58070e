import crypto from 'node:crypto';
import type { z } from 'zod';
import type { Sql } from '../db/client.js';
import type { QuotaGate, Services } from '../gateway.js';
import type { Principal } from '../http/auth/principal.js';
import type { Logger } from '../log.js';
import { iso } from '../lib/encoding.js';
import { conflict, invalid, notFound, refused, unprocessable } from '../lib/errors.js';
import { findRefusedText } from '../lib/text.js';
import type { IamCache } from './cache.js';
import { evaluateScps, normalizeScpDocument, type AttachedScp, type ScpDocument } from './policy.js';
import * as repo from './repo.js';
import { SCP_DOCUMENT_SIZE_DEFAULT, SCPS_PER_ENTITY_DEFAULT, scpDocumentSchema } from './schemas.js';

function view(r: repo.ScpRow) {
  return { id: r.id, name: r.name, description: r.description, document: r.document as unknown as Record<string, unknown>, document_size: r.document_size, created_at: iso(r.created_at), created_by: r.created_by };
}

function formatIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${['document', ...i.path.map(String)].join('.')}: ${i.message}`).join('; ');
}

/** Service control policies (deny-based; platform admins manage and attach them) and the SCP layer. */
export class Scps {
  constructor(
    private readonly sql: Sql,
    private readonly cache: IamCache,
    private readonly accounts: Pick<Services['accounts'], 'require'>,
    private readonly quotaGate: QuotaGate,
    private readonly log: Logger,
  ) {}

  async create(input: { name: string; description?: string; document: string | Record<string, unknown> }, by: string) {
    const text = typeof input.document === 'string' ? input.document : JSON.stringify(input.document);
    const maxSize = SCP_DOCUMENT_SIZE_DEFAULT;
    if (text.length > maxSize) {
      throw unprocessable(`SCP document is ${text.length} characters; quota scp-document-size (SCP document size) allows at most ${maxSize}`, {
        type: 'quota-exceeded', extra: { quota_code: 'scp-document-size', service_code: 'organizations', limit: maxSize, size: text.length },
      });
    }
    let raw: unknown = input.document;
    if (typeof raw === 'string') {
      try {
        raw = JSON.parse(raw);
      } catch (err) {
        throw invalid(`document is not valid JSON: ${(err as Error).message}`);
      }
      // the body guard saw only a string: its escapes may decode to text Postgres cannot store
      const refused = findRefusedText(raw, 'body.document');
      if (refused) throw invalid(refused);
    }
    const parsed = scpDocumentSchema.safeParse(normalizeScpDocument(raw));
    if (!parsed.success) throw invalid(`document is not a valid SCP: ${formatIssues(parsed.error)}`, { type: 'invalid-scp' });
    // stored as submitted (a single Statement object or Action string stays so); validated normalized
    const row = await repo.insertScp(this.sql, { id: crypto.randomUUID(), name: input.name, description: input.description ?? '', document: raw as ScpDocument, size: text.length, by });
    if (!row) throw conflict(`an SCP named ${input.name} already exists`);
    return view(row);
  }

  async list() {
    return (await repo.listScps(this.sql)).map(view);
  }

  async get(id: string) {
    const row = await repo.scp(this.sql, id);
    if (!row) throw notFound(`SCP ${id} not found`);
    return view(row);
  }

  async delete(id: string): Promise<void> {
    const result = await repo.deleteScp(this.sql, id);
    if (result === 'absent') throw notFound(`SCP ${id} not found`);
    if (result === 'attached') throw conflict(`SCP ${id} is attached to accounts; detach it first`);
  }

  async attached(accountId: string) {
    await this.accounts.require(accountId);
    return (await repo.attachedScps(this.sql, accountId)).map((r) => ({ ...view(r), attached_at: iso(r.attached_at), attached_by: r.attached_by }));
  }

  async attach(accountId: string, scpId: string, by: string): Promise<{ created: boolean }> {
    await this.accounts.require(accountId);
    const maxAttached = await this.quotaLimit(accountId, 'scps-attached-per-entity', SCPS_PER_ENTITY_DEFAULT);
    const maxSize = await this.quotaLimit(accountId, 'scp-document-size', SCP_DOCUMENT_SIZE_DEFAULT);
    const created = await this.sql.begin(async (tx) => {
      await repo.lockAccountScps(tx, accountId);
      const policy = await repo.scp(tx, scpId, true);
      if (!policy) throw notFound(`SCP ${scpId} not found`);
      if (policy.document_size > maxSize) {
        throw unprocessable(`SCP ${policy.name} is ${policy.document_size} characters; quota scp-document-size allows at most ${maxSize}`, {
          type: 'quota-exceeded', extra: { quota_code: 'scp-document-size', service_code: 'organizations', limit: maxSize },
        });
      }
      const attached = await repo.attachedScps(tx, accountId);
      if (attached.some((a) => a.id === scpId)) return false;
      if (attached.length >= maxAttached) {
        throw conflict(`account ${accountId} already has ${attached.length} SCPs attached; quota scps-attached-per-entity (SCPs attached per entity) allows ${maxAttached}`, {
          type: 'quota-exceeded', extra: { quota_code: 'scps-attached-per-entity', service_code: 'organizations', limit: maxAttached },
        });
      }
      return repo.attachScp(tx, accountId, scpId, by);
    });
    await this.cache.invalidate([`scp:${accountId}`], { wait: true });
    return { created };
  }

  async detach(accountId: string, scpId: string): Promise<void> {
    if (!(await repo.detachScp(this.sql, accountId, scpId))) throw notFound(`SCP ${scpId} is not attached to account ${accountId}`);
    await this.cache.invalidate([`scp:${accountId}`], { wait: true });
  }

  /**
   * The SCP layer: an explicit Deny of `action` on `resource` (the request path) in a policy
   * attached to the caller's account is 403. Synchronous when the account's SCPs are cached.
   */
  check(principal: Principal, action: string, resource: string): void | Promise<void> {
    const accountId = principal.accountId;
    if (!accountId) return;
    const cached = this.cache.peek<AttachedScp[]>('scp', accountId);
    if (cached) return apply(cached, accountId, action, resource);
    return this.scpsOf(accountId).then((scps) => apply(scps, accountId, action, resource));
  }

  private scpsOf(accountId: string): Promise<AttachedScp[]> {
    return this.cache.get('scp', accountId, async () => (await repo.attachedScps(this.sql, accountId)).map((r) => ({ id: r.id, name: r.name, document: r.document })));
  }

  /** The quota's applied value for the account; the spec default when the quota gate has none. */
  private async quotaLimit(accountId: string, code: string, fallback: number): Promise<number> {
    try {
      const v = await this.quotaGate.limit(accountId, 'organizations', code);
      return v ?? Number.POSITIVE_INFINITY;
    } catch (err) {
      this.log.debug({ err, code }, 'iam: quota gate has no value; using the spec default');
      return fallback;
    }
  }
}

function apply(scps: AttachedScp[], accountId: string, action: string, resource: string): void {
  if (scps.length === 0) return;
  const denied = evaluateScps(scps, action, resource);
  if (denied) {
    throw refused(`action ${action} denied by policy ${denied.scp.name} (${denied.scp.id}): an explicit Deny in a service control policy of account ${accountId} blocks it regardless of roles and capabilities`, {
      type: 'denied-by-policy', extra: { action, policy_id: denied.scp.id, policy_name: denied.scp.name },
    });
  }
}
