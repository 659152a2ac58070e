import crypto from 'node:crypto';
import net from 'node:net';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { SignJWT, jwtVerify } from 'jose';
import type { FastifyRequest } from 'fastify';
import type { Gateway } from '../gateway.js';
import { conflict, notFound, refused, unauthenticated } from '../lib/errors.js';
import { repo, type LicenseRow, type LicenseStatus } from './repo.js';
import { thingKind } from './kinds.js';
import { safeEqual, sha256 } from '../lib/encoding.js';

const LICENSE_DAYS = 30;
const LICENSE_AUDIENCE = 'device-license';

export interface GrantedLicense { licenseId: string; license: string; expiresAt: string }
export interface PendingLicense { licenseId: string; status: 'pending' }

const licenseExpiry = (from: Date) => new Date(from.getTime() + LICENSE_DAYS * 86_400_000);

/** A decision as the tenant plane shows it. */
export function presentLicense(row: LicenseRow) {
  return {
    licenseId: row.id, thingId: row.thing_id, kind: row.kind, status: row.decision, features: row.features ?? [], reason: row.reason,
    requestedAt: row.created_at.toISOString(), decidedAt: row.decided_at?.toISOString() ?? null, decidedBy: row.decided_by,
    expiresAt: row.expires_at?.toISOString() ?? null,
  };
}

/** `INTERNAL_CIDRS` as a BlockList (IPv4-mapped IPv6 peers are checked as IPv4). */
export function internalNetworks(cidrs: string[]): (address: string | undefined) => boolean {
  const list = new net.BlockList();
  for (const cidr of cidrs) {
    const [addr, bits] = cidr.split('/');
    const type = net.isIPv6(addr) ? 'ipv6' : 'ipv4';
    list.addSubnet(addr, Number(bits ?? (type === 'ipv6' ? 128 : 32)), type);
  }
  return (address) => {
    if (!address) return false;
    const v4 = address.startsWith('::ffff:') && net.isIPv4(address.slice(7)) ? address.slice(7) : address;
    return list.check(v4, net.isIPv6(v4) ? 'ipv6' : 'ipv4');
  };
}

/**
 * Device plane after enrollment: who the caller is (enrollment token, or the client certificate
 * a TLS-terminating proxy on the internal network forwards), status, licenses, and the broker's
 * authentication callback.
 */
export class DdiService {
  readonly isInternal: (address: string | undefined) => boolean;

  constructor(private readonly gw: Gateway) {
    this.isInternal = internalNetworks(gw.config.INTERNAL_CIDRS);
  }

  /**
   * `Authorization: TargetToken <enrollment token>` (valid until the token's expiry, used or not),
   * or `X-SSL-Client-Cert` (URL-encoded PEM, as nginx's `$ssl_client_escaped_cert`) from a proxy
   * on the internal network: issued by the device CA, CN = thingId, not revoked.
   */
  async authenticate(request: FastifyRequest, thingId: string): Promise<void> {
    const header = request.headers.authorization;
    if (header) {
      const [scheme, token] = header.split(/\s+/, 2);
      if (scheme?.toLowerCase() !== 'targettoken' || !token) throw unauthenticated('use Authorization: TargetToken <enrollment token> or mutual TLS');
      const thing = await repo.thingByToken(this.gw.sql, sha256(token));
      if (!thing || !safeEqual(Buffer.from(thing.id), Buffer.from(thingId))) throw unauthenticated('enrollment token is not valid for this thing');
      if (!thing.enrollment_token_expires_at || thing.enrollment_token_expires_at.getTime() <= Date.now()) throw unauthenticated('enrollment token has expired; use mutual TLS');
      if (thing.revoked_at) throw refused('this thing was revoked');
      return;
    }
    const forwarded = request.headers['x-ssl-client-cert'];
    if (typeof forwarded === 'string' && this.isInternal(request.socket.remoteAddress)) {
      let cert: x509.X509Certificate;
      try { cert = new x509.X509Certificate(decodeURIComponent(forwarded)); } catch { throw unauthenticated('client certificate could not be parsed'); }
      const ok = cert.issuer === this.gw.pki.deviceCaCert.subject
        && (await cert.verify({ publicKey: this.gw.pki.deviceCaCert, date: new Date() }).catch(() => false));
      if (!ok) throw unauthenticated('client certificate is not issued by the device CA');
      if (cert.subject !== `CN=${thingId}`) throw refused('client certificate belongs to another thing');
      const stored = await repo.certificate(this.gw.sql, cert.serialNumber.toLowerCase());
      if (!stored || stored.revoked) throw refused('client certificate is revoked');
      return;
    }
    throw unauthenticated('device authentication required: Authorization: TargetToken <enrollment token>, or mutual TLS');
  }

  async status(thingId: string) {
    const thing = await repo.thing(this.gw.sql, thingId);
    if (!thing) throw notFound(`thing ${thingId} not found`);
    const actor = await this.gw.actors.get(thingKind, thingId);
    const cert = await repo.currentCertificate(this.gw.sql, thingId);
    return {
      thingId, state: actor?.state ?? null, revoked: !!thing.revoked_at, enrolledAt: thing.enrolled_at?.toISOString() ?? null,
      certificate: cert ? { serial: cert.serial, notAfter: cert.not_after.toISOString(), revoked: cert.revoked } : null,
    };
  }

  // --- licenses: a JWT (ES256, license key) naming the thing, expiring; every decision is a row

  /**
   * A model with licenseApproval 'manual' makes a request wait for the tenant: one pending row per
   * thing, answered 202 with its id; otherwise the license is granted at once (200).
   */
  async requestLicense(thingId: string, features: string[] = []): Promise<GrantedLicense | PendingLicense> {
    const thing = await this.licensable(thingId, 'request');
    if (thing.license_approval === 'manual') return { licenseId: await this.pendingRequest(thing, features), status: 'pending' };
    return this.grant(thingId, 'request', features);
  }

  /** Renew stays automatic under 'manual' too: it needs a granted license, so the tenant approved once already. */
  async renewLicense(thingId: string, license: string): Promise<GrantedLicense> {
    let claims: Record<string, unknown>;
    try {
      ({ payload: claims } = await jwtVerify(license, (header) => this.gw.pki.licenseKeys.verificationKey(header), {
        issuer: this.gw.config.PUBLIC_BASE_URL, audience: LICENSE_AUDIENCE, subject: thingId, algorithms: ['ES256', 'RS256'],
      }));
    } catch {
      await repo.recordLicense(this.gw.sql, { id: crypto.randomUUID(), thingId, kind: 'renew', decision: 'denied', reason: 'license invalid or expired' });
      throw refused('license is not a valid, unexpired license of this thing; request a new one');
    }
    const previous = await repo.license(this.gw.sql, String(claims.jti));
    if (!previous || previous.decision !== 'granted' || previous.thing_id !== thingId) throw refused('license is not known');
    await this.licensable(thingId, 'renew');
    return this.grant(thingId, 'renew', (claims.features as string[] | undefined) ?? []);
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
  private async licensable(thingId: string, kind: 'request' | 'renew') {
    const thing = await repo.thingWithApproval(this.gw.sql, thingId);
    if (!thing) throw notFound(`thing ${thingId} not found`);
    const cert = await repo.currentCertificate(this.gw.sql, thingId);
    const refusal = thing.revoked_at || cert?.revoked ? 'thing revoked' : !cert ? 'thing not enrolled' : undefined;
    if (refusal) {
      await repo.recordLicense(this.gw.sql, { id: crypto.randomUUID(), thingId, kind, decision: 'denied', reason: refusal });
      throw refused(`license refused: ${refusal}`);
    }
    return thing;
  }

  /**
   * The thing's one pending request (partial unique index): a repeat, concurrent or not, gets the
   * same id. A conflicting insert waits for the other inserter; if the row it met was decided
   * before we read it, a new request is due, so insert again.
   */
  private async pendingRequest(thing: { id: string; account_id: string; serial: string }, features: string[]): Promise<string> {
    const thingId = thing.id;
    for (let attempt = 0; attempt < 3; attempt++) {
      // a new request is announced (event license.requested -> the account's approvers are notified) in its own commit
      const inserted = await this.gw.actors.run(async (uow) => {
        const id = await repo.insertPendingLicense(uow.sql, { id: crypto.randomUUID(), thingId, features });
        if (id) await uow.emit('license', id, { type: 'license.requested', licenseId: id, thingId, serial: thing.serial, features }, thing.account_id);
        return id;
      });
      if (inserted) return inserted;
      const existing = await repo.pendingLicenseOf(this.gw.sql, thingId);
      if (existing) return existing;
    }
    throw conflict('the license request was decided while it was being repeated; send it again');
  }

  private async grant(thingId: string, kind: 'request' | 'renew', features: string[]): Promise<GrantedLicense> {
    const id = crypto.randomUUID();
    const decidedAt = new Date();
    const expiresAt = licenseExpiry(decidedAt);
    const license = await this.sign({ id, thing_id: thingId, features, decided_at: decidedAt, expires_at: expiresAt });
    await repo.recordLicense(this.gw.sql, { id, thingId, kind, decision: 'granted', features, decidedAt, expiresAt });
    return { licenseId: id, license, expiresAt: expiresAt.toISOString() };
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

  /** Grants a pending request; the license's validity counts from this moment. */
  async approveLicense(accountId: string, licenseId: string, by: string) {
    const current = await this.pendingOfAccount(accountId, licenseId, 'approve');
    if (current.thing_revoked) throw conflict(`thing ${current.thing_id} is revoked: its license request can only be denied`);
    const at = new Date();
    const row = await repo.decideLicense(this.gw.sql, { id: licenseId, decision: 'granted', by, at, expiresAt: licenseExpiry(at) });
    if (!row) throw await this.decidedMeanwhile(licenseId, 'approve');
    return presentLicense(row);
  }

  async denyLicense(accountId: string, licenseId: string, by: string, reason?: string) {
    await this.pendingOfAccount(accountId, licenseId, 'deny');
    const row = await repo.decideLicense(this.gw.sql, { id: licenseId, decision: 'denied', by, at: new Date(), reason: reason ?? 'denied by the tenant' });
    if (!row) throw await this.decidedMeanwhile(licenseId, 'deny');
    return presentLicense(row);
  }

  /** 404 for unknown ids and other accounts' licenses (no existence leak); 409 when already decided. */
  private async pendingOfAccount(accountId: string, licenseId: string, verb: 'approve' | 'deny') {
    const row = await repo.licenseWithThing(this.gw.sql, licenseId);
    if (!row || row.account_id !== accountId) throw notFound(`license ${licenseId} not found`);
    if (row.decision !== 'pending') throw conflict(`cannot ${verb} license ${licenseId}: it is already ${row.decision}; only pending requests are decided`);
    return row;
  }

  /** The conditional update matched nothing: another decision won the race, or the thing was revoked meanwhile. */
  private async decidedMeanwhile(licenseId: string, verb: 'approve' | 'deny') {
    const row = await repo.license(this.gw.sql, licenseId);
    if (row && row.decision !== 'pending') return conflict(`cannot ${verb} license ${licenseId}: it is already ${row.decision}; only pending requests are decided`);
    return conflict(`cannot ${verb} license ${licenseId}: its thing was revoked meanwhile`);
  }

  /** The broker's authentication callback: allow when CN = client id = username and its certificate is valid and not revoked. */
  async authnEmqx(input: { clientid: string; username: string; cert_cn: string }): Promise<'allow' | 'deny'> {
    if (!input.cert_cn || input.cert_cn !== input.clientid || input.cert_cn !== input.username) return 'deny';
    if (!/^[0-9a-f-]{36}$/i.test(input.cert_cn)) return 'deny';
    const cert = await repo.currentCertificate(this.gw.sql, input.cert_cn.toLowerCase());
    if (!cert || cert.revoked || cert.not_after.getTime() <= Date.now()) return 'deny';
    return 'allow';
  }
}
