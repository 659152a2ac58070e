import crypto from 'node:crypto';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { SignJWT, jwtVerify } from 'jose';
import type { Gateway } from '../gateway.js';
import type { UnitOfWork } from '../actors/store.js';
import { conflict, notFound, refused, unauthenticated } from '../lib/errors.js';
import { isoNow } from '../lib/clock.js';
import { repo, type LicenseRow, type LicenseStatus, type ThingRow } from './repo.js';
import { licenseKind, thingKind } from './kinds.js';
import { sha256 } from '../lib/encoding.js';
import { isUuid } from '../http/auth/principal.js';
import type { LicenseInput } from '../../machines/license.js';

const LICENSE_AUDIENCE = 'device-license';

export interface GrantedLicense { licenseId: string; license: string; expiresAt: string }
export interface PendingLicense { licenseId: string; status: 'pending' }

/** A decision as the tenant plane shows it. */
export function presentLicense(row: LicenseRow) {
  return {
    licenseId: row.id, thingId: row.thing_id, kind: row.kind, status: row.decision, features: row.features ?? [], reason: row.reason,
    requestedAt: row.created_at.toISOString(), decidedAt: row.decided_at?.toISOString() ?? null, decidedBy: row.decided_by,
    expiresAt: row.expires_at?.toISOString() ?? null,
  };
}

/** Revocation answers the thing's open license request: denied, by whoever revoked it (same unit of work, thing locked first). */
export async function denyOpenLicenseRequest(uow: UnitOfWork, thingId: string, by: string, at: string): Promise<void> {
  const pending = await repo.pendingLicenseOf(uow.sql, thingId);
  if (pending) await uow.trySend(licenseKind, pending, { type: 'DENY', at, by, reason: 'thing revoked' });
}

/**
 * Device plane after enrollment: who the caller is (enrollment token or client certificate, as
 * plain values: the HTTP adapter in routes.ts extracts them), status, licenses, and the broker's
 * authentication callback.
 */
export class DdiService {
  /** told when a renewed certificate authenticates for the first time (src/trust/rotation.ts) */
  onFirstUse?: (thingId: string, serial: string) => Promise<void>;

  constructor(private readonly gw: Gateway) {}

  /** The thing an enrollment token authenticates (valid until the token's expiry, used or not). */
  async thingOfToken(token: string): Promise<string> {
    const thing = await repo.thingByToken(this.gw.sql, sha256(token));
    if (!thing) throw unauthenticated('enrollment token is not valid', { guess: { scheme: 'enrollment-token', kind: 'unknown-identifier' } });
    if (!thing.enrollment_token_expires_at || thing.enrollment_token_expires_at.getTime() <= this.gw.clock.now().getTime()) {
      throw unauthenticated('enrollment token has expired; use mutual TLS');
    }
    if (thing.revoked_at) throw refused('this thing was revoked');
    return thing.id;
  }

  /**
   * The thing a client certificate (DER, or PEM) authenticates: issued by the device CA, valid now,
   * CN = thingId, known and not revoked. Checked here even when the TLS layer verified it, so
   * the direct (mTLS listener) and forwarded (trusted proxy) paths answer the same.
   */
  async thingOfCertificate(certificate: Uint8Array | string): Promise<string> {
    let cert: x509.X509Certificate;
    try { cert = new x509.X509Certificate(certificate); } catch { throw unauthenticated('client certificate could not be parsed'); }
    const ok = cert.issuer === this.gw.pki.deviceCaCert.subject
      && (await cert.verify({ publicKey: this.gw.pki.deviceCaCert, date: this.gw.clock.now() }).catch(() => false));
    if (!ok) throw unauthenticated('client certificate is not issued by the device CA or is not valid now');
    const thingId = cert.subject.startsWith('CN=') ? cert.subject.slice(3) : '';
    const stored = await repo.certificate(this.gw.sql, cert.serialNumber.toLowerCase());
    if (!isUuid(thingId) || !stored || stored.thing_id !== thingId.toLowerCase()) throw unauthenticated('client certificate is not known');
    if (stored.revoked) throw refused('client certificate is revoked');
    if (stored.awaiting_first_use) await this.onFirstUse?.(stored.thing_id, stored.serial);
    return stored.thing_id;
  }

  async status(thingId: string) {
    const thing = await repo.thing(this.gw.sql, thingId);
    if (!thing) throw notFound(`thing ${thingId} not found`);
    const actor = await this.gw.actors.get(thingKind, thingId);
    const cert = await repo.currentCertificate(this.gw.sql, thingId);
    return {
      // REGISTERED is the spec's "none": no lifecycle state before enrollment
      thingId, state: !actor || actor.state === 'REGISTERED' ? null : actor.state, revoked: !!thing.revoked_at,
      enrolledAt: thing.enrolled_at?.toISOString() ?? null,
      certificate: cert ? { serial: cert.serial, notAfter: cert.not_after.toISOString(), revoked: cert.revoked } : null,
    };
  }

  // --- licenses: a JWT (ES256, license key) naming the thing, expiring; every decision is a license actor and its row

  /**
   * A model with licenseApproval 'manual' makes a request wait for the tenant: one pending row per
   * thing, answered 202 with its id; otherwise the license is granted at once (200).
   */
  async requestLicense(thingId: string, features: string[] = []): Promise<GrantedLicense | PendingLicense> {
    const thing = await this.licensable(thingId, 'request', features);
    if (thing.license_approval === 'manual') return { licenseId: await this.pendingRequest(thing, features), status: 'pending' };
    return this.grant(thing, 'request', features);
  }

  /** Renew stays automatic under 'manual' too: it needs a granted license, so the tenant approved once already. */
  async renewLicense(thingId: string, license: string): Promise<GrantedLicense> {
    let claims: Record<string, unknown>;
    try {
      ({ payload: claims } = await jwtVerify(license, (header) => this.gw.pki.licenseKeys.verificationKey(header), {
        issuer: this.gw.config.PUBLIC_BASE_URL, audience: LICENSE_AUDIENCE, subject: thingId, algorithms: ['ES256', 'RS256'],
      }));
    } catch {
      const thing = await repo.thing(this.gw.sql, thingId);
      if (thing) await this.decide(thing, 'renew', [], { decision: 'denied', reason: 'license invalid or expired' });
      throw refused('license is not a valid, unexpired license of this thing; request a new one');
    }
    const previous = await repo.license(this.gw.sql, String(claims.jti));
    // the previous license's machine says whether it is granted and unexpired
    const renewable = previous && previous.thing_id === thingId && (await this.gw.actors.can(licenseKind, previous.id, { type: 'RENEW', at: isoNow(this.gw.clock) }));
    if (!renewable) throw refused('license is not known');
    const thing = await this.licensable(thingId, 'renew', []);
    return this.grant(thing, 'renew', (claims.features as string[] | undefined) ?? []);
  }

  /** GET /ddi/v1/{thingId}/license/{licenseId}: how a device learns the tenant's decision. */
  async licenseStatus(thingId: string, licenseId: string) {
    const row = await repo.license(this.gw.sql, licenseId);
    if (!row || row.thing_id !== thingId) throw notFound(`license ${licenseId} not found`);
    if (row.decision === 'granted' && row.expires_at) {
      return { licenseId, status: row.decision, license: await this.sign(row), expiresAt: row.expires_at.toISOString() };
    }
    return { licenseId, status: row.decision, ...(row.reason ? { reason: row.reason } : {}) };
  }

  /** The thing, when a license may be issued to it; otherwise the refusal is recorded and 403. */
  private async licensable(thingId: string, kind: 'request' | 'renew', features: string[]) {
    const thing = await repo.thingWithApproval(this.gw.sql, thingId);
    if (!thing) throw notFound(`thing ${thingId} not found`);
    const cert = await repo.currentCertificate(this.gw.sql, thingId);
    const refusal = thing.revoked_at || cert?.revoked ? 'thing revoked' : !cert ? 'thing not enrolled' : undefined;
    if (refusal) {
      await this.decide(thing, kind, features, { decision: 'denied', reason: refusal });
      throw refused(`license refused: ${refusal}`);
    }
    return thing;
  }

  /** An automatic decision: its row, and its actor born decided (granted: valid from now). */
  private async decide(thing: ThingRow, kind: 'request' | 'renew', features: string[], decided: NonNullable<LicenseInput['decided']>) {
    const id = crypto.randomUUID();
    const created = await this.gw.actors.run(async (uow) => {
      await repo.insertDecidedLicense(uow.sql, { id, thingId: thing.id, kind, decision: decided.decision, features });
      return uow.create(licenseKind, id, this.licenseInput(id, thing, kind, features, decided));
    });
    return created.snapshot.context;
  }

  private licenseInput(id: string, thing: ThingRow, kind: 'request' | 'renew', features: string[], decided?: LicenseInput['decided']): LicenseInput {
    return { id, thingId: thing.id, accountId: thing.account_id, serial: thing.serial, kind, features, requestedAt: isoNow(this.gw.clock), ...(decided ? { decided } : {}) };
  }

  /**
   * The thing's one pending request (partial unique index): a repeat, concurrent or not, gets the
   * same id. A conflicting insert waits for the other inserter; if the row it met was decided
   * before we read it, a new request is due, so insert again.
   */
  private async pendingRequest(thing: ThingRow, features: string[]): Promise<string> {
    for (let attempt = 0; attempt < 3; attempt++) {
      // a new request is announced by its machine (license.requested -> the account's approvers are notified) in its own commit
      const inserted = await this.gw.actors.run(async (uow) => {
        const id = await repo.insertPendingLicense(uow.sql, { id: crypto.randomUUID(), thingId: thing.id, features });
        if (id) await uow.create(licenseKind, id, this.licenseInput(id, thing, 'request', features));
        return id;
      });
      if (inserted) return inserted;
      const existing = await repo.pendingLicenseOf(this.gw.sql, thing.id);
      if (existing) return existing;
    }
    throw conflict('the license request was decided while it was being repeated; send it again');
  }

  private async grant(thing: ThingRow, kind: 'request' | 'renew', features: string[]): Promise<GrantedLicense> {
    const c = await this.decide(thing, kind, features, { decision: 'granted' });
    const expiresAt = new Date(c.expiresAt!);
    const license = await this.sign({ id: c.id, thing_id: thing.id, features, decided_at: new Date(c.decidedAt!), expires_at: expiresAt });
    return { licenseId: c.id, license, expiresAt: expiresAt.toISOString() };
  }

  /**
   * The license of a granted row, signed ES256 with the license key (header `kid`; public keys at
   * /api/v1/certificates/license-jwks). Rebuilt from the row: nothing to store, and the device may
   * fetch an approved license again (same claims; ECDSA signatures differ each time).
   */
  private async sign(row: Pick<LicenseRow, 'id' | 'thing_id' | 'features' | 'expires_at'> & { decided_at: Date | null; created_at?: Date }): Promise<string> {
    const issuedAt = row.decided_at ?? row.created_at ?? new Date();
    return new SignJWT({ features: row.features ?? [] })
      .setProtectedHeader({ alg: 'ES256', typ: 'JWT', kid: this.gw.pki.licenseKeys.kid })
      .setIssuer(this.gw.config.PUBLIC_BASE_URL).setAudience(LICENSE_AUDIENCE).setSubject(row.thing_id).setJti(row.id)
      .setIssuedAt(Math.floor(issuedAt.getTime() / 1000)).setExpirationTime(Math.floor(row.expires_at!.getTime() / 1000))
      .sign(this.gw.pki.licenseKeys.privateKey);
  }

  // --- tenant plane: the approval queue (capability approve_licenses on the deciding routes)

  async listLicenses(accountId: string, q: { status?: LicenseStatus; limit: number; after?: string }) {
    const rows = await repo.listLicenses(this.gw.sql, accountId, q);
    const items = rows.slice(0, q.limit).map(presentLicense);
    return { items, next_cursor: rows.length > q.limit ? items[items.length - 1].licenseId : null };
  }

  /**
   * Grants a pending request; the license's validity counts from this moment. The thing's actor is
   * locked first (the order revocation takes), so a concurrent revocation is never overtaken.
   */
  async approveLicense(accountId: string, licenseId: string, by: string) {
    return this.gw.actors.run(async (uow) => {
      const row = await this.ofAccount(uow, accountId, licenseId);
      const thing = await uow.load(thingKind, row.thing_id);
      const thingRevoked = !thing || thing.snapshot.context.revokedAt !== undefined;
      const sent = await uow.trySend(licenseKind, licenseId, { type: 'GRANT', at: isoNow(this.gw.clock), by, thingRevoked });
      if ('refused' in sent) {
        if (sent.state === 'pending') throw conflict(`thing ${row.thing_id} is revoked: its license request can only be denied`);
        throw notPending(licenseId, 'approve', sent.state);
      }
      return presentLicense((await repo.license(uow.sql, licenseId))!);
    });
  }

  async denyLicense(accountId: string, licenseId: string, by: string, reason?: string) {
    return this.gw.actors.run(async (uow) => {
      await this.ofAccount(uow, accountId, licenseId);
      const sent = await uow.trySend(licenseKind, licenseId, { type: 'DENY', at: isoNow(this.gw.clock), by, reason: reason ?? 'denied by the tenant' });
      if ('refused' in sent) throw notPending(licenseId, 'deny', sent.state);
      return presentLicense((await repo.license(uow.sql, licenseId))!);
    });
  }

  /** 404 for unknown ids and other accounts' licenses (no existence leak). */
  private async ofAccount(uow: UnitOfWork, accountId: string, licenseId: string) {
    const row = await repo.licenseWithAccount(uow.sql, licenseId);
    if (!row || row.account_id !== accountId) throw notFound(`license ${licenseId} not found`);
    return row;
  }

  /** The broker's authentication callback: allow when CN = client id = username and its certificate is valid and not revoked. */
  async authnEmqx(input: { clientid: string; username: string; cert_cn: string }): Promise<'allow' | 'deny'> {
    if (!input.cert_cn || input.cert_cn !== input.clientid || input.cert_cn !== input.username) return 'deny';
    if (!/^[0-9a-f-]{36}$/i.test(input.cert_cn)) return 'deny';
    const cert = await repo.currentCertificate(this.gw.sql, input.cert_cn.toLowerCase());
    if (!cert || cert.revoked || cert.not_after.getTime() <= this.gw.clock.now().getTime()) return 'deny';
    return 'allow';
  }
}

const notPending = (licenseId: string, verb: 'approve' | 'deny', state: string) =>
  conflict(`cannot ${verb} license ${licenseId}: it is already ${state}; only pending requests are decided`);
