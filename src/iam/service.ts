import crypto from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Gateway, QuotaGate } from '../gateway.js';
import type { AccountsService } from './accounts.js';
import type { ActorKind } from '../actors/store.js';
import { conflict, invalid, notFound, refused, unauthenticated, unprocessable } from '../lib/errors.js';
import type { Principal } from '../http/auth/principal.js';
import type { RouteAuth } from '../http/auth/plugin.js';
import { staticCredentialMachine } from '../../machines/staticCredential.js';
import { IamCache } from './cache.js';
import { evaluateScps, normalizeScpDocument, type AttachedScp, type ScpDocument } from './policy.js';
import * as repo from './repo.js';
import {
  ACCESS_KEY_ID, CAPABILITIES, SCP_DOCUMENT_SIZE_DEFAULT, SCPS_PER_ENTITY_DEFAULT, SECRET_KEY, SESSION_TOKEN,
  STATIC_PREFIX, TEMPORARY_PREFIX, scpDocumentSchema, type Capability,
} from './schemas.js';

export const staticCredentialKind: ActorKind<typeof staticCredentialMachine> = {
  type: 'staticCredential',
  machine: staticCredentialMachine,
  accountOf: (c) => c.accountId,
};

export const MAX_STATIC_PER_USER = 2;
const LAST_USED_FLUSH_MS = 5_000;
const SESSION_DESCRIPTION = 'Temporary credentials (STS get-session-token, identity center)';

const sha256 = (s: string): Buffer => crypto.hash('sha256', s, 'buffer');
/** Constant-time comparison of a presented secret with a stored SHA-256 hash. */
const hashMatches = (presented: string, stored: Buffer) => crypto.timingSafeEqual(sha256(presented), stored);
const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

export function newAccessKeyId(prefix: string): string {
  return prefix + crypto.randomBytes(8).toString('hex').toUpperCase();
}
export const newSecretKey = () => crypto.randomBytes(40).toString('base64url');
export const newSessionToken = () => crypto.randomBytes(32).toString('base64url');

/** What the SVC hot path keeps per access key id (hashes only). */
interface CachedCredential {
  id: string;
  accountId: string;
  accessKeyId: string;
  temporary: boolean;
  secretHash: Buffer;
  tokenHash: Buffer | null;
  status: 'ACTIVE' | 'INACTIVE' | 'REVOKED';
  expiresAt: number | null;
  principalId: string;
  realm: string;
}

export interface StaticCredentialView {
  id: string;
  access_key_id: string;
  status: 'ACTIVE' | 'INACTIVE';
  principal_id: string;
  description: string;
  created_at: string;
  expires_at: string | null;
  last_used_at: string | null;
}

function viewStatic(r: repo.CredentialRow): StaticCredentialView {
  return {
    id: r.id, access_key_id: r.access_key_id, status: r.status as 'ACTIVE' | 'INACTIVE', principal_id: r.principal_id,
    description: r.description, created_at: iso(r.created_at)!, expires_at: iso(r.expires_at), last_used_at: iso(r.last_used_at),
  };
}

function viewScp(r: repo.ScpRow) {
  return { id: r.id, name: r.name, description: r.description, document: r.document as unknown as Record<string, unknown>, document_size: r.document_size, created_at: iso(r.created_at)!, created_by: r.created_by };
}

function viewAssignment(r: repo.AssignmentRow) {
  return { account_id: r.account_id, realm: r.realm, principal_id: r.principal_id, roles: r.roles, created_at: iso(r.created_at)!, updated_at: iso(r.updated_at)!, assigned_by: r.assigned_by };
}

const rolesKey = (accountId: string, principalId: string) => `${accountId}|${principalId}`;
const assignmentKey = (realm: string, principalId: string, accountId: string) => `${realm}|${principalId}|${accountId}`;

/**
 * IAM: static and temporary credentials, SVC authentication, identity-center assignments, the
 * roles the identity provider last asserted, SCPs and capabilities, and the two authorization
 * layers after the role check (SCP explicit deny, capability).
 */
export class IamService {
  readonly cache: IamCache;
  private lastUsed = new Map<string, number>();
  private flushTimer?: NodeJS.Timeout;

  constructor(
    private readonly gw: Gateway,
    private readonly accounts: Pick<AccountsService, 'require'>,
    private readonly quotaGate: QuotaGate,
  ) {
    this.cache = new IamCache(gw);
  }

  async start(): Promise<void> {
    await this.cache.start();
    this.flushTimer = setInterval(() => void this.flushLastUsed().catch((err) => this.gw.log.warn({ err }, 'iam: last_used_at flush failed')), LAST_USED_FLUSH_MS);
    this.flushTimer.unref();
  }

  async stop(): Promise<void> {
    if (this.flushTimer) clearInterval(this.flushTimer);
    await this.flushLastUsed().catch(() => {});
    await this.cache.stop();
  }

  // --- static credentials --------------------------------------------------------------------

  async createStatic(accountId: string, input: { principal_id: string; description?: string }, by: string): Promise<StaticCredentialView & { secret_key: string }> {
    const id = crypto.randomUUID();
    const accessKeyId = newAccessKeyId(STATIC_PREFIX);
    const secret = newSecretKey();
    const createdAt = new Date().toISOString();
    const row = await this.gw.actors.run(async (uow) => {
      await repo.lockPrincipal(uow.sql, accountId, input.principal_id);
      const n = await repo.countStatic(uow.sql, accountId, input.principal_id);
      if (n >= MAX_STATIC_PER_USER) {
        throw conflict(`user ${input.principal_id} already has ${n} static credentials in account ${accountId}; the limit is ${MAX_STATIC_PER_USER} per IAM user per account (delete one first)`, {
          type: 'credential-limit', extra: { limit: MAX_STATIC_PER_USER },
        });
      }
      await uow.create(staticCredentialKind, id, { id, accountId, accessKeyId, principalId: input.principal_id, createdAt });
      return repo.insertCredential(uow.sql, {
        id, account_id: accountId, access_key_id: accessKeyId, kind: 'static', secret_hash: sha256(secret), session_token_hash: null,
        status: 'ACTIVE', principal_id: input.principal_id, principal_type: 'user', realm: `acc-${accountId}`,
        description: input.description ?? '', created_at: createdAt, expires_at: null,
      });
    });
    this.gw.log.info({ accountId, credentialId: id, accessKeyId, by }, 'iam: static credential created');
    return { ...viewStatic(row), last_used_at: null, secret_key: secret };
  }

  async listStatic(accountId: string, principalId?: string): Promise<StaticCredentialView[]> {
    await this.flushLastUsed();
    return (await repo.listStatic(this.gw.sql, accountId, principalId)).map(viewStatic);
  }

  async getStatic(accountId: string, id: string): Promise<StaticCredentialView> {
    await this.flushLastUsed();
    const row = await repo.staticCredential(this.gw.sql, accountId, id);
    if (!row) throw notFound(`credential ${id} not found in account ${accountId}`);
    return viewStatic(row);
  }

  async updateStatic(accountId: string, id: string, input: { status: 'ACTIVE' | 'INACTIVE'; description?: string }, by: string): Promise<StaticCredentialView> {
    const row = await this.gw.actors.run(async (uow) => {
      const current = await repo.staticCredential(uow.sql, accountId, id, true);
      if (!current) throw notFound(`credential ${id} not found in account ${accountId}`);
      const at = new Date().toISOString();
      if (current.status !== input.status) {
        await uow.send(staticCredentialKind, id, input.status === 'INACTIVE' ? { type: 'DEACTIVATE', at, by } : { type: 'ACTIVATE', at, by });
      }
      return repo.updateStatic(uow.sql, id, input.status, input.description ?? current.description);
    });
    await this.cache.invalidate([`cred:${row.access_key_id}`], { wait: true });
    return viewStatic(row);
  }

  async deleteStatic(accountId: string, id: string, by: string): Promise<void> {
    const row = await this.gw.actors.run(async (uow) => {
      const current = await repo.staticCredential(uow.sql, accountId, id, true);
      if (!current) throw notFound(`credential ${id} not found in account ${accountId}`);
      await uow.send(staticCredentialKind, id, { type: 'DELETE', at: new Date().toISOString(), by });
      await repo.deleteCredential(uow.sql, id);
      return current;
    });
    await this.cache.invalidate([`cred:${row.access_key_id}`], { wait: true });
  }

  // --- STS -------------------------------------------------------------------------------------

  /** The caller of an STS call: a bearer JWT of an idc-* realm, else 400 (spec). */
  requireIdcJwt(principal: Principal): void {
    if (principal.via !== 'jwt' || principal.realmKind !== 'idc') {
      const what = principal.via !== 'jwt' ? 'an access-key credential' : `a JWT of realm ${principal.realm}`;
      throw invalid(`STS calls accept only a bearer JWT from an identity-center realm (idc-*); this call carries ${what}`, { type: 'sts-realm' });
    }
  }

  /** Account-bound STS calls: `X-Account-Id` present, equal to the account named in the call, assigned. */
  requireAccountHeader(principal: Principal, request: FastifyRequest, named: string): void {
    const header = request.headers['x-account-id'];
    if (typeof header !== 'string' || header === '') throw invalid('header X-Account-Id is required for this STS call');
    if (header.toLowerCase() !== named.toLowerCase()) throw invalid(`X-Account-Id ${header} does not match the account of the request (${named})`);
    if (!principal.accountId) throw refused(`you (${principal.realm}/${principal.sub}) are not assigned to account ${named}`, { type: 'not-assigned' });
  }

  async getSessionToken(principal: Principal, accountId: string, durationSeconds: number) {
    const a = await this.assignmentRoles(principal.realm, principal.sub, accountId);
    if (!a) throw refused(`you (${principal.realm}/${principal.sub}) are not assigned to account ${accountId}; a platform admin assigns identity-center users to accounts`, { type: 'not-assigned' });
    const id = crypto.randomUUID();
    const accessKeyId = newAccessKeyId(TEMPORARY_PREFIX);
    const secret = newSecretKey();
    const token = newSessionToken();
    const now = Date.now();
    const expiration = new Date(now + durationSeconds * 1000).toISOString();
    await repo.insertCredential(this.gw.sql, {
      id, account_id: accountId, access_key_id: accessKeyId, kind: 'temporary', secret_hash: sha256(secret), session_token_hash: sha256(token),
      status: 'ACTIVE', principal_id: principal.sub, principal_type: 'federated', realm: principal.realm,
      description: SESSION_DESCRIPTION, created_at: new Date(now).toISOString(), expires_at: expiration,
    });
    return { access_key_id: accessKeyId, secret_key: secret, session_token: token, expiration };
  }

  async listSessions(principal: Principal, accountId: string) {
    await this.flushLastUsed();
    const rows = await repo.listSessions(this.gw.sql, accountId, principal.realm, principal.sub);
    return rows.map((r) => ({
      id: r.id, access_key_id: r.access_key_id, status: 'ACTIVE' as const, principal_id: r.principal_id, principal_type: 'federated' as const,
      description: r.description, created_at: iso(r.created_at)!, last_used_at: iso(r.last_used_at ?? r.created_at)!, expires_at: iso(r.expires_at)!,
    }));
  }

  async revokeSession(principal: Principal, accountId: string, accessKeyId: string) {
    const keys = await repo.revokeSessions(this.gw.sql, accountId, principal.realm, principal.sub, accessKeyId);
    if (keys.length === 0) throw notFound(`no active session ${accessKeyId} of yours in account ${accountId}`);
    await this.cache.invalidate(keys.map((k) => `cred:${k}`), { wait: true });
    return { message: `session ${accessKeyId} revoked`, access_key_id: accessKeyId };
  }

  async revokeAllSessions(principal: Principal, accountId: string) {
    const keys = await repo.revokeSessions(this.gw.sql, accountId, principal.realm, principal.sub);
    await this.cache.invalidate(keys.map((k) => `cred:${k}`), { wait: true });
    return { message: `${keys.length} session(s) revoked`, revoked_count: keys.length };
  }

  /** The hourly job: deletes expired (and revoked, once expired) temporary credentials. */
  async cleanupExpired(): Promise<number> {
    const keys = await repo.deleteExpiredTemporary(this.gw.sql);
    if (keys.length) {
      await this.cache.invalidate(keys.map((k) => `cred:${k}`), { wait: false });
      this.gw.log.info({ deleted: keys.length }, 'iam: expired temporary credentials deleted');
    }
    return keys.length;
  }

  // --- SVC authentication (hot path) ----------------------------------------------------------

  async authenticateSvc(credentials: string, request: FastifyRequest): Promise<Principal> {
    const { accessKeyId, secret } = parseSvc(credentials);
    const c = this.cache.peek<CachedCredential>('cred', accessKeyId) ?? (await this.cache.get('cred', accessKeyId, () => this.loadCredential(accessKeyId)));
    if (!c) throw unauthenticated(`credential not found: no access key ${accessKeyId}`, { type: 'credential-not-found' });
    if (!hashMatches(secret, c.secretHash)) throw unauthenticated(`secret key invalid for access key ${accessKeyId}`, { type: 'secret-invalid' });
    if (c.status === 'REVOKED') throw unauthenticated(`temporary credential ${accessKeyId} has been revoked`, { type: 'credential-revoked' });
    if (c.status === 'INACTIVE') throw unauthenticated(`credential inactive: access key ${accessKeyId} is INACTIVE (an account admin can set it ACTIVE)`, { type: 'credential-inactive' });
    if (c.expiresAt !== null && c.expiresAt <= Date.now()) throw unauthenticated(`credential expired at ${new Date(c.expiresAt).toISOString()}; request new temporary credentials`, { type: 'credential-expired' });
    let roles: string[];
    if (c.temporary) {
      const token = request.headers['x-session-token'];
      if (token === undefined || token === '') throw unauthenticated(`session token missing: access key ${accessKeyId} is temporary (ASIA); send X-Session-Token`, { type: 'session-token-missing' });
      if (typeof token !== 'string' || !SESSION_TOKEN.test(token) || !hashMatches(token, c.tokenHash!)) {
        throw unauthenticated(`session token invalid for access key ${accessKeyId}`, { type: 'session-token-invalid' });
      }
      const key = assignmentKey(c.realm, c.principalId, c.accountId);
      roles = (this.cache.peek<string[] | null>('assign', key) ?? (await this.assignmentRoles(c.realm, c.principalId, c.accountId))) ?? [];
    } else {
      const key = rolesKey(c.accountId, c.principalId);
      roles = (this.cache.peek<string[] | undefined>('roles', key) ?? (await this.principalRoles(c.accountId, c.principalId))) ?? [];
    }
    this.lastUsed.set(accessKeyId, Date.now());
    return {
      via: 'credential',
      sub: c.principalId,
      realm: c.realm,
      realmKind: c.temporary ? 'idc' : 'acc',
      accountId: c.accountId,
      roles,
      credential: { id: c.id, accessKeyId, temporary: c.temporary },
    };
  }

  private async loadCredential(accessKeyId: string): Promise<CachedCredential | undefined> {
    const r = await repo.credentialByAccessKey(this.gw.sql, accessKeyId);
    if (!r) return undefined;
    return {
      id: r.id, accountId: r.account_id, accessKeyId, temporary: r.kind === 'temporary', secretHash: r.secret_hash, tokenHash: r.session_token_hash,
      status: r.status, expiresAt: r.expires_at ? new Date(r.expires_at).getTime() : null, principalId: r.principal_id, realm: r.realm,
    };
  }

  async flushLastUsed(): Promise<void> {
    if (this.lastUsed.size === 0) return;
    const batch = this.lastUsed;
    this.lastUsed = new Map();
    await repo.touchCredentials(this.gw.sql, [...batch.keys()], [...batch.values()].map((t) => new Date(t).toISOString()));
  }

  // --- roles and assignments -------------------------------------------------------------------

  principalRoles(accountId: string, principalId: string): Promise<string[] | undefined> {
    return this.cache.get('roles', rolesKey(accountId, principalId), () => repo.principalRoles(this.gw.sql, accountId, principalId));
  }

  /** Records the roles the identity provider asserted for an acc-* user (a write only when they changed). */
  async recordAssertedRoles(accountId: string, principalId: string, roles: string[]): Promise<void> {
    const key = rolesKey(accountId, principalId);
    const sorted = [...new Set(roles)].sort();
    const known = this.cache.peek<string[] | undefined>('roles', key);
    if (known && known.length === sorted.length && known.every((r, i) => r === sorted[i])) return;
    const changed = await repo.recordPrincipalRoles(this.gw.sql, accountId, principalId, sorted);
    if (changed) await this.cache.invalidate([`roles:${key}`], { wait: false });
    this.cache.set('roles', key, sorted);
  }

  assignmentRoles(realm: string, principalId: string, accountId: string): Promise<string[] | null> {
    return this.cache.get('assign', assignmentKey(realm, principalId, accountId), async () => {
      const a = await repo.assignment(this.gw.sql, realm, principalId, accountId);
      return a ? a.roles : null;
    });
  }

  async putAssignment(input: { accountId: string; realm: string; principalId: string; roles: string[] }, by: string) {
    await this.requireAccount(input.accountId);
    const { row, created } = await repo.upsertAssignment(this.gw.sql, { ...input, roles: [...new Set(input.roles)].sort(), by });
    await this.cache.invalidate([`assign:${assignmentKey(input.realm, input.principalId, input.accountId)}`], { wait: true });
    return { assignment: viewAssignment(row), created };
  }

  async listAssignments(accountId: string) {
    await this.requireAccount(accountId);
    return (await repo.listAssignments(this.gw.sql, accountId)).map(viewAssignment);
  }

  async deleteAssignment(accountId: string, realm: string, principalId: string): Promise<void> {
    if (!(await repo.deleteAssignment(this.gw.sql, accountId, realm, principalId))) {
      throw notFound(`no assignment of ${realm}/${principalId} to account ${accountId}`);
    }
    await this.cache.invalidate([`assign:${assignmentKey(realm, principalId, accountId)}`], { wait: true });
  }

  // --- capabilities ------------------------------------------------------------------------------

  capabilitiesOf(accountId: string): Promise<ReadonlySet<string>> {
    return this.cache.get('cap', accountId, async () => new Set((await repo.capabilities(this.gw.sql, accountId)).map((r) => r.capability)));
  }

  async listCapabilities(accountId: string) {
    await this.requireAccount(accountId);
    const rows = await repo.capabilities(this.gw.sql, accountId);
    return {
      account_id: accountId,
      capabilities: rows.map((r) => r.capability as Capability),
      grants: rows.map((r) => ({ capability: r.capability as Capability, granted_at: iso(r.granted_at)!, granted_by: r.granted_by })),
    };
  }

  /** Grants a capability; effective on the next request on every node (acknowledged invalidation). */
  async grantCapability(accountId: string, capability: string, by: string): Promise<void> {
    checkCapability(capability);
    await this.requireAccount(accountId);
    await repo.grantCapability(this.gw.sql, accountId, capability, by);
    await this.cache.invalidate([`cap:${accountId}`], { wait: true });
  }

  async revokeCapability(accountId: string, capability: string, _by?: string): Promise<boolean> {
    checkCapability(capability);
    await this.requireAccount(accountId);
    const removed = await repo.revokeCapability(this.gw.sql, accountId, capability);
    await this.cache.invalidate([`cap:${accountId}`], { wait: true });
    return removed;
  }

  // --- SCPs --------------------------------------------------------------------------------------

  private async quotaLimit(accountId: string | undefined, code: string, fallback: number): Promise<number> {
    const gate = this.quotaGate;
    if (!accountId) return fallback;
    try {
      const v = await gate.limit(accountId, 'organizations', code);
      return v ?? Number.POSITIVE_INFINITY;
    } catch (err) {
      this.gw.log.debug({ err, code }, 'iam: quota gate has no value; using the spec default');
      return fallback;
    }
  }

  async createScp(input: { name: string; description?: string; document: string | Record<string, unknown> }, by: string) {
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
    }
    const parsed = scpDocumentSchema.safeParse(normalizeScpDocument(raw));
    if (!parsed.success) throw invalid(`document is not a valid SCP: ${formatIssues(parsed.error)}`, { type: 'invalid-scp' });
    // stored as submitted (a single Statement object or Action string stays so); validated normalized
    const row = await repo.insertScp(this.gw.sql, { id: crypto.randomUUID(), name: input.name, description: input.description ?? '', document: raw as ScpDocument, size: text.length, by });
    if (!row) throw conflict(`an SCP named ${input.name} already exists`);
    return viewScp(row);
  }

  async listScps() {
    return (await repo.listScps(this.gw.sql)).map(viewScp);
  }

  async getScp(id: string) {
    const row = await repo.scp(this.gw.sql, id);
    if (!row) throw notFound(`SCP ${id} not found`);
    return viewScp(row);
  }

  async deleteScp(id: string): Promise<void> {
    const result = await repo.deleteScp(this.gw.sql, id);
    if (result === 'absent') throw notFound(`SCP ${id} not found`);
    if (result === 'attached') throw conflict(`SCP ${id} is attached to accounts; detach it first`);
  }

  async attachedScps(accountId: string) {
    await this.requireAccount(accountId);
    return (await repo.attachedScps(this.gw.sql, accountId)).map((r) => ({ ...viewScp(r), attached_at: iso(r.attached_at)!, attached_by: r.attached_by }));
  }

  async attachScp(accountId: string, scpId: string, by: string): Promise<{ created: boolean }> {
    await this.requireAccount(accountId);
    const maxAttached = await this.quotaLimit(accountId, 'scps-attached-per-entity', SCPS_PER_ENTITY_DEFAULT);
    const maxSize = await this.quotaLimit(accountId, 'scp-document-size', SCP_DOCUMENT_SIZE_DEFAULT);
    const created = await this.gw.sql.begin(async (tx) => {
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

  async detachScp(accountId: string, scpId: string): Promise<void> {
    if (!(await repo.detachScp(this.gw.sql, accountId, scpId))) throw notFound(`SCP ${scpId} is not attached to account ${accountId}`);
    await this.cache.invalidate([`scp:${accountId}`], { wait: true });
  }

  private scpsOf(accountId: string): Promise<AttachedScp[]> {
    return this.cache.get('scp', accountId, async () => (await repo.attachedScps(this.gw.sql, accountId)).map((r) => ({ id: r.id, name: r.name, document: r.document })));
  }

  // --- authorization layers --------------------------------------------------------------------

  /** SCP layer: synchronous when the account's SCPs are cached (the hot path). */
  checkScp(principal: Principal, route: RouteAuth, request: FastifyRequest): void | Promise<void> {
    if (!principal.accountId) return;
    const cached = this.cache.peek<AttachedScp[]>('scp', principal.accountId);
    if (cached) return this.applyScps(cached, principal.accountId, route, request);
    const accountId = principal.accountId;
    return this.scpsOf(accountId).then((scps) => this.applyScps(scps, accountId, route, request));
  }

  private applyScps(scps: AttachedScp[], accountId: string, route: RouteAuth, request: FastifyRequest): void {
    if (scps.length === 0) return;
    const denied = evaluateScps(scps, route.action, request.url.split('?')[0]);
    if (denied) {
      throw refused(`action ${route.action} denied by policy ${denied.scp.name} (${denied.scp.id}): an explicit Deny in a service control policy of account ${accountId} blocks it regardless of roles and capabilities`, {
        type: 'denied-by-policy', extra: { action: route.action, policy_id: denied.scp.id, policy_name: denied.scp.name },
      });
    }
  }

  /** Capability layer: only routes that declare a capability pay for it. */
  checkCapability(principal: Principal, route: RouteAuth): void | Promise<void> {
    if (!route.capability || !principal.accountId) return;
    const accountId = principal.accountId;
    const capability = route.capability;
    return this.capabilitiesOf(accountId).then((caps) => {
      if (caps.has(capability)) return;
      const hint = capability === 'enroll_things'
        ? '; join existing devices with POST /api/v1/things/join and an access_code instead'
        : '; a platform admin grants capabilities';
      throw refused(`account not qualified: ${route.action} requires capability ${capability}, which account ${accountId} does not hold${hint}`, {
        type: 'account-not-qualified', extra: { action: route.action, capability },
      });
    });
  }

  private async requireAccount(accountId: string): Promise<void> {
    await this.accounts.require(accountId);
  }
}

function checkCapability(capability: string): asserts capability is Capability {
  if (!(CAPABILITIES as readonly string[]).includes(capability)) {
    throw invalid(`unknown capability ${JSON.stringify(capability)}; one of ${CAPABILITIES.join(', ')}`);
  }
}

function formatIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${['document', ...i.path.map(String)].join('.')}: ${i.message}`).join('; ');
}

/** `SVC base64(akid:secret)` -> its parts, or 401 credential format invalid. */
export function parseSvc(credentials: string): { accessKeyId: string; secret: string } {
  const invalid = (why: string) => unauthenticated(`credential format invalid: ${why}; expected SVC base64(<access_key_id>:<secret_key>)`, { type: 'credential-format-invalid' });
  if (credentials.length > 200 || !/^[A-Za-z0-9+/]+={0,2}$/.test(credentials)) throw invalid('not Base64');
  const decoded = Buffer.from(credentials, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) throw invalid('no colon between access key id and secret key');
  const accessKeyId = decoded.slice(0, colon);
  const secret = decoded.slice(colon + 1);
  if (!ACCESS_KEY_ID.test(accessKeyId)) throw invalid('access key id must be AKSV or ASIA followed by 16 upper-case hex characters');
  if (!SECRET_KEY.test(secret)) throw invalid('secret key must be 54 Base64url characters');
  return { accessKeyId, secret };
}

