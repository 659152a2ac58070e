import crypto from 'node:crypto';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { SignJWT, jwtVerify } from 'jose';
import type { CertificateUse, Gateway } from '../gateway.js';
import type { UnitOfWork } from '../actors/store.js';
import { conflict, notFound, refused, unauthenticated } from '../lib/errors.js';
import { isoNow } from '../lib/clock.js';
import { repo, type LicenseApproval, type LicenseRow, type LicenseStatus, type ThingRow } from './repo.js';
import { certificateRevoked, deviceCertificateKind, enrollmentTokenKind, licenseKind, thingKind, thingRevoked } from './kinds.js';
import { thingStanding } from './certificates.js';
import { sha256 } from '../lib/encoding.js';
import { isUuid } from '../http/auth/principal.js';
import type { LicenseContext, LicenseGrounds, LicenseInput } from '../../machines/license.js';

const LICENSE_AUDIENCE = 'device-license';
/** the partial unique index that keeps one pending request per thing (migration 0102) */
const ONE_PENDING = 'device_licenses_one_pending';

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
  /** `rotation`: told when a renewed certificate authenticates for the first time (src/trust/rotation.ts) */
  constructor(private readonly gw: Gateway, private readonly rotation: CertificateUse) {}

  /** The thing an enrollment token authenticates: its token's machine says (until its expiry, used or not), and its own whether it is revoked. */
  async thingOfToken(token: string): Promise<string> {
    const row = await repo.thingByToken(this.gw.sql, sha256(token));
    if (!row) throw unauthenticated('enrollment token is not valid', { guess: { scheme: 'enrollment-token', kind: 'unknown-identifier' } });
    const [tokenActor, thing] = await Promise.all([this.gw.actors.get(enrollmentTokenKind, row.id), this.gw.actors.get(thingKind, row.id)]);
    if (!tokenActor?.snapshot.can({ type: 'AUTHENTICATE', at: isoNow(this.gw.clock) })) throw unauthenticated('enrollment token has expired; use mutual TLS');
    if (thingRevoked(thing)) throw refused('this thing was revoked');
    return row.id;
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
    // the certificate's actor (id = its serial as stored) knows its thing and its lifecycle
    const stored = await this.gw.actors.get(deviceCertificateKind, cert.serialNumber.toLowerCase());
    if (!isUuid(thingId) || !stored || stored.snapshot.context.thingId !== thingId.toLowerCase()) throw unauthenticated('client certificate is not known');
    if (certificateRevoked(stored)) throw refused('client certificate is revoked');
    const { thingId: owner, serial } = stored.snapshot.context;
    if (stored.state === 'issued') await this.rotation.used(owner, serial);
    return owner;
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
   * The license machine decides each request at its birth (machines/license.ts): refused when the
   * thing is revoked or not enrolled (recorded, then 403); under a model's licenseApproval
   * 'manual', pending for the tenant: one pending row per thing, answered 202 with its id;
   * otherwise granted at once (200).
   */
  async requestLicense(thingId: string, features: string[] = []): Promise<GrantedLicense | PendingLicense> {
    const thing = await repo.thingWithApproval(this.gw.sql, thingId);
    if (!thing) throw notFound(`thing ${thingId} not found`);
    const decided = await this.decide(thing, 'request', features, await this.grounds(thing));
    if (decided.state === 'pending') return { licenseId: decided.context.id, status: 'pending' };
    return this.granted(thing, decided);
  }

  /** Renew stays automatic under 'manual' too (the machine's rule): it needs a granted license, so the tenant approved once already. */
  async renewLicense(thingId: string, license: string): Promise<GrantedLicense> {
    let claims: Record<string, unknown>;
    try {
      ({ payload: claims } = await jwtVerify(license, (header) => this.gw.pki.licenseKeys.verificationKey(header), {
        issuer: this.gw.config.PUBLIC_BASE_URL, audience: LICENSE_AUDIENCE, subject: thingId, algorithms: ['ES256', 'RS256'],
      }));
    } catch {
      const thing = await repo.thing(this.gw.sql, thingId);
      if (thing) await this.decide(thing, 'renew', [], { refusal: 'license invalid or expired' });
      throw refused('license is not a valid, unexpired license of this thing; request a new one');
    }
    const previous = await repo.license(this.gw.sql, String(claims.jti));
    // the previous license's machine says whether it is granted and unexpired
    const renewable = previous && previous.thing_id === thingId && (await this.gw.actors.can(licenseKind, previous.id, { type: 'RENEW', at: isoNow(this.gw.clock) }));
    if (!renewable) throw refused('license is not known');
    const thing = await repo.thingWithApproval(this.gw.sql, thingId);
    if (!thing) throw notFound(`thing ${thingId} not found`);
    const features = (claims.features as string[] | undefined) ?? [];
    return this.granted(thing, await this.decide(thing, 'renew', features, await this.grounds(thing)));
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

  /** What a request is decided on: the thing's and its newest certificate's machines, and the model's approval mode. */
  private async grounds(thing: ThingRow & { license_approval: LicenseApproval }): Promise<LicenseGrounds> {
    const standing = await thingStanding(this.gw.actors, this.gw.sql, thing.id);
    return { approval: thing.license_approval, thingRevoked: standing.revoked, enrolled: standing.current !== undefined };
  }

  /**
   * A new decision: its row (the request) and its actor, born decided or pending, in one unit of
   * work. The thing's one pending request (partial unique index): a repeat, concurrent or not,
   * gets the same id: the projection of a second `pending` fails on the index (after waiting for
   * the other inserter), and the existing one is answered; if that one was decided before we read
   * it, a new request is due, so try again.
   */
  private async decide(thing: ThingRow, kind: 'request' | 'renew', features: string[], grounds: LicenseGrounds) {
    for (let attempt = 0; attempt < 3; attempt++) {
      const id = crypto.randomUUID();
      try {
        // a pending request is announced by its machine (license.requested -> the account's approvers are notified) in its own commit
        const created = await this.gw.actors.run(async (uow) => {
          await repo.insertLicense(uow.sql, { id, thingId: thing.id, kind, features });
          return uow.create(licenseKind, id, this.licenseInput(id, thing, kind, features, grounds));
        });
        return { state: created.state, context: created.snapshot.context };
      } catch (err) {
        if ((err as { constraint_name?: string }).constraint_name !== ONE_PENDING) throw err;
      }
      const existing = await repo.pendingLicenseOf(this.gw.sql, thing.id);
      if (existing) return { state: 'pending', context: { id: existing } };
    }
    throw conflict('the license request was decided while it was being repeated; send it again');
  }

  private licenseInput(id: string, thing: ThingRow, kind: 'request' | 'renew', features: string[], grounds: LicenseGrounds): LicenseInput {
    return { id, thingId: thing.id, accountId: thing.account_id, serial: thing.serial, kind, features, requestedAt: isoNow(this.gw.clock), grounds };
  }

  /** The answer to a decision taken at once: the signed license, or 403 with the machine's reason. */
  private async granted(thing: ThingRow, decided: { state: string; context: Partial<LicenseContext> & { id: string } }): Promise<GrantedLicense> {
    const c = decided.context;
    if (decided.state !== 'granted') throw refused(`license refused: ${c.reason ?? decided.state}`);
    const expiresAt = new Date(c.expiresAt!);
    const license = await this.sign({ id: c.id, thing_id: thing.id, features: c.features ?? [], decided_at: new Date(c.decidedAt!), expires_at: expiresAt });
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

  /**
   * The broker's authentication callback: allow when CN = client id = username and its newest
   * certificate's machine would let it authenticate now (not revoked nor superseded, not expired).
   */
  async authnEmqx(input: { clientid: string; username: string; cert_cn: string }): Promise<'allow' | 'deny'> {
    if (!input.cert_cn || input.cert_cn !== input.clientid || input.cert_cn !== input.username) return 'deny';
    if (!/^[0-9a-f-]{36}$/i.test(input.cert_cn)) return 'deny';
    const cert = await repo.currentCertificate(this.gw.sql, input.cert_cn.toLowerCase());
    const actor = cert && (await this.gw.actors.get(deviceCertificateKind, cert.serial));
    return actor?.snapshot.can({ type: 'AUTHENTICATE', at: isoNow(this.gw.clock) }) ? 'allow' : 'deny';
  }
}

const notPending = (licenseId: string, verb: 'approve' | 'deny', state: string) =>
  conflict(`cannot ${verb} license ${licenseId}: it is already ${state}; only pending requests are decided`);
