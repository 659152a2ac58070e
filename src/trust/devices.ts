import crypto from 'node:crypto';
import net from 'node:net';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { SignJWT, jwtVerify } from 'jose';
import type { FastifyRequest } from 'fastify';
import type { Gateway } from '../gateway.js';
import { forbidden, notFound, unauthorized } from '../http/problem.js';
import { repo } from './repo.js';
import { thingKind } from './kinds.js';
import { safeEqual, sha256 } from './secrets.js';

const LICENSE_DAYS = 30;
const LICENSE_AUDIENCE = 'device-license';

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
export class DeviceService {
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
      if (scheme?.toLowerCase() !== 'targettoken' || !token) throw unauthorized('use Authorization: TargetToken <enrollment token> or mutual TLS');
      const thing = await repo.thingByToken(this.gw.sql, sha256(token));
      if (!thing || !safeEqual(Buffer.from(thing.id), Buffer.from(thingId))) throw unauthorized('enrollment token is not valid for this thing');
      if (!thing.enrollment_token_expires_at || thing.enrollment_token_expires_at.getTime() <= Date.now()) throw unauthorized('enrollment token has expired; use mutual TLS');
      if (thing.revoked_at) throw forbidden('this thing was revoked');
      return;
    }
    const forwarded = request.headers['x-ssl-client-cert'];
    if (typeof forwarded === 'string' && this.isInternal(request.socket.remoteAddress)) {
      let cert: x509.X509Certificate;
      try { cert = new x509.X509Certificate(decodeURIComponent(forwarded)); } catch { throw unauthorized('client certificate could not be parsed'); }
      const ok = cert.issuer === this.gw.pki.deviceCaCert.subject
        && (await cert.verify({ publicKey: this.gw.pki.deviceCaCert, date: new Date() }).catch(() => false));
      if (!ok) throw unauthorized('client certificate is not issued by the device CA');
      if (cert.subject !== `CN=${thingId}`) throw forbidden('client certificate belongs to another thing');
      const stored = await repo.certificate(this.gw.sql, cert.serialNumber.toLowerCase());
      if (!stored || stored.revoked) throw forbidden('client certificate is revoked');
      return;
    }
    throw unauthorized('device authentication required: Authorization: TargetToken <enrollment token>, or mutual TLS');
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

  /** A license: a JWT (RS256, device CA key) naming the thing, expiring; every decision is recorded. */
  async requestLicense(thingId: string, features: string[] = []) {
    return this.grant(thingId, 'request', features);
  }

  async renewLicense(thingId: string, license: string) {
    let claims: Record<string, unknown>;
    try {
      ({ payload: claims } = await jwtVerify(license, this.verifyKey(), {
        issuer: this.gw.config.PUBLIC_BASE_URL, audience: LICENSE_AUDIENCE, subject: thingId, algorithms: ['RS256'],
      }));
    } catch {
      await repo.recordLicense(this.gw.sql, { id: crypto.randomUUID(), thingId, kind: 'renew', decision: 'denied', reason: 'license invalid or expired' });
      throw forbidden('license is not a valid, unexpired license of this thing; request a new one');
    }
    const previous = await repo.license(this.gw.sql, String(claims.jti));
    if (!previous || previous.decision !== 'granted' || previous.thing_id !== thingId) throw forbidden('license is not known');
    return this.grant(thingId, 'renew', (claims.features as string[] | undefined) ?? []);
  }

  private async grant(thingId: string, kind: 'request' | 'renew', features: string[]) {
    const thing = await repo.thing(this.gw.sql, thingId);
    if (!thing) throw notFound(`thing ${thingId} not found`);
    const id = crypto.randomUUID();
    const cert = await repo.currentCertificate(this.gw.sql, thingId);
    const refusal = thing.revoked_at || cert?.revoked ? 'thing revoked' : !cert ? 'thing not enrolled' : undefined;
    if (refusal) {
      await repo.recordLicense(this.gw.sql, { id, thingId, kind, decision: 'denied', reason: refusal });
      throw forbidden(`license refused: ${refusal}`);
    }
    const expiresAt = new Date(Date.now() + LICENSE_DAYS * 86_400_000);
    const license = await new SignJWT({ features })
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
      .setIssuer(this.gw.config.PUBLIC_BASE_URL).setAudience(LICENSE_AUDIENCE).setSubject(thingId).setJti(id)
      .setIssuedAt().setExpirationTime(Math.floor(expiresAt.getTime() / 1000))
      .sign(this.gw.pki.deviceCaSigningKey);
    await repo.recordLicense(this.gw.sql, { id, thingId, kind, decision: 'granted', expiresAt });
    return { licenseId: id, license, expiresAt: expiresAt.toISOString() };
  }

  private verifyKeyCache?: crypto.KeyObject;
  private verifyKey(): crypto.KeyObject {
    return (this.verifyKeyCache ??= crypto.createPublicKey(this.gw.pki.deviceCaSigningKey));
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
