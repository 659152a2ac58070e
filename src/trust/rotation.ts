import nodeCrypto from 'node:crypto';
import { z } from 'zod';
import type { CertificateRenewal, CertificateUse, DeviceSessions, Gateway, RenewedCertificate, ZodApp } from '../gateway.js';
import { invalid, notFound, refused, tooMany } from '../lib/errors.js';
import { isoNow } from '../lib/clock.js';
import type { CrlService } from './crl.js';
import { thingIdParams } from './schemas.js';
import { repo } from './repo.js';
import { certificateRevoked, deviceCertificateKind, thingKind, thingRevoked } from './kinds.js';
import { certificatesBorn, supersedeOthers } from './certificates.js';

export const renewSchema = z.strictObject({ csr: z.string().min(1).max(16_384).describe('PEM PKCS#10 request for the new key pair') });
export const renewedSchema = z.strictObject({
  thingId: z.uuid(),
  certificate: z.string().describe('PEM; CN = thingId, signed by the device CA'),
  serial: z.string(),
  notAfter: z.string(),
  caCertificate: z.string(),
  caBundlePem: z.string(),
});

/** the window of the pending-renewal cap (CERT_RENEWAL_MAX_PENDING per thing) */
const RENEWAL_WINDOW_MS = 24 * 3600_000;

/**
 * Certificate rotation (issue 18, item 4). A device renews with a CSR while authenticated by its
 * current certificate (HTTP with mutual TLS, or its MQTT session: src/broker/renewal.ts); the new
 * certificate is stored beside the old one, its actor born `issued` (awaiting its first use).
 * Both stay valid until the new one is first seen (broker CONNECT or the device-cert HTTP scheme):
 * then its machine accepts FIRST_USE, every other certificate of the thing is superseded (their
 * machines: on the CRL) and the CRL regenerated in one transaction, the thing itself stays as it
 * is, and a session still on an old certificate is dropped on whichever node holds it. A device
 * that lost the answer may renew again with its old certificate; whichever new certificate it
 * uses first wins and the others are superseded.
 */
export class CertificateRotation implements CertificateUse, CertificateRenewal {
  constructor(private readonly gw: Gateway, private readonly crl: CrlService, private readonly sessions: DeviceSessions) {}

  async renew(thingId: string, csr: string, presented?: string): Promise<RenewedCertificate> {
    const { pki, config } = this.gw;
    const spki = await this.checkedKey(thingId, csr);
    const issued = await this.gw.actors.run(async (uow) => {
      // the thing's actor serialises one thing's renewals (the cap) and orders them with a revocation
      const thing = await uow.load(thingKind, thingId);
      if (!thing) throw notFound(`thing ${thingId} not found`);
      if (thingRevoked(thing)) throw refused(`thing ${thingId} is revoked; it cannot renew its certificate`);
      // age by database time, like every certificate's created_at (it also orders renewals: see
      // expiryWarnings.ts); each certificate's lifecycle from its machine
      const rows = await repo.certificatesOf(uow.sql, thingId);
      const machines = await Promise.all(rows.map((c) => uow.load(deviceCertificateKind, c.serial)));
      const certs = rows.map((c, i) => ({ ...c, live: !certificateRevoked(machines[i]), pending: machines[i]?.state === 'issued' }));
      if (presented !== undefined && !certs.some((c) => c.live && bareSerial(c.serial) === bareSerial(presented))) {
        throw refused('the certificate this device authenticated with is revoked or replaced; it cannot renew');
      }
      if (certs.some((c) => publicKeyOf(c.pem).equals(spki))) throw invalid('the CSR carries a key this thing already had a certificate for; generate a new key pair');
      const ages = certs.filter((c) => c.pending && c.age_ms < RENEWAL_WINDOW_MS).map((c) => c.age_ms);
      const max = config.CERT_RENEWAL_MAX_PENDING;
      if (ages.length >= max) {
        throw tooMany(`thing ${thingId} already has ${ages.length} renewed certificates not yet used (at most ${max} per 24 h); connect with one of them`, {
          type: 'too-many-pending-renewals', retryAfterSeconds: (RENEWAL_WINDOW_MS - Math.max(...ages)) / 1000,
        });
      }
      const cert = await pki.signDeviceCertificate(thingId, spki, config.DEVICE_CERT_DAYS);
      await repo.insertCertificate(uow.sql, { serial: cert.serial, thingId, pem: cert.pem, sealedKey: null, notAfter: cert.notAfter });
      await certificatesBorn(uow, [{ serial: cert.serial, thingId, notAfter: cert.notAfter }], isoNow(this.gw.clock), true);
      return cert;
    });
    return {
      thingId, certificate: issued.pem, serial: issued.serial, notAfter: issued.notAfter.toISOString(),
      caCertificate: pki.deviceCaPem, caBundlePem: pki.bundlePem,
    };
  }

  /** The CSR's public key, once the CSR verifies, names this thing (or nothing) and holds an acceptable key. */
  private async checkedKey(thingId: string, csr: string): Promise<Buffer> {
    let parsed: { spki: Buffer; commonName: string | undefined };
    try { parsed = await this.gw.pki.parseCsr(csr); } catch { throw invalid('csr is not a PEM PKCS#10 request with a valid signature'); }
    if (parsed.commonName !== undefined && parsed.commonName.toLowerCase() !== thingId.toLowerCase()) {
      throw invalid(`the CSR's subject CN must be the thingId ${thingId} (or be left out), not ${JSON.stringify(parsed.commonName.slice(0, 100))}`);
    }
    const problem = keyProblem(parsed.spki);
    if (problem) throw invalid(`the CSR's key is not accepted: ${problem}`);
    return parsed.spki;
  }

  /**
   * First use of a renewed certificate: its machine accepts FIRST_USE once, and the thing's other
   * certificates are superseded (CRL included); any other call changes nothing.
   */
  async used(thingId: string, serial: string): Promise<void> {
    // cheap miss first, outside a transaction (the projection): nothing of this thing awaits its first use (the usual connect)
    const pending = await repo.awaitingFirstUse(this.gw.sql, thingId, bareSerial(serial));
    if (!pending) return;
    const number = await this.gw.actors.run(async (uow) => {
      // the thing's actor serialises rotations of one thing (two new certificates used at once) and orders them with a revocation
      await uow.load(thingKind, thingId);
      const at = isoNow(this.gw.clock);
      const first = await uow.trySend(deviceCertificateKind, pending, { type: 'FIRST_USE', at });
      if ('refused' in first) return undefined;
      const superseded = await supersedeOthers(uow, thingId, pending, at);
      if (!superseded.length) return undefined;
      return (await this.crl.regenerate(uow.sql)).number;
    });
    if (number === undefined) return;
    await this.crl.announce(number);
    // a session still on a now revoked certificate (e.g. MQTT while HTTP used the new one) ends
    await this.sessions.disconnect(thingId, { onlyRevokedCertificate: true })
      .catch((err) => this.gw.log.error({ err, thingId }, 'session on a replaced certificate not disconnected'));
  }
}

export async function rotationRoutes(app: ZodApp, rotation: CertificateRotation): Promise<void> {
  app.post('/ddi/v1/:thingId/certificate/renew', {
    config: { auth: { schemes: ['device-cert'] } },
    schema: {
      tags: ['devices'], summary: 'Renew the device certificate with a CSR (mutual TLS with the current certificate); the old one is revoked when the new one is first used',
      params: thingIdParams, body: renewSchema, response: { 201: renewedSchema },
    },
  }, async (request, reply) => reply.code(201).send(await rotation.renew(request.params.thingId, request.body.csr)));
}

/** SPKI DER of a PEM certificate's public key. */
const publicKeyOf = (pem: string) => new nodeCrypto.X509Certificate(pem).publicKey.export({ type: 'spki', format: 'der' });

/** Device keys: EC P-256 or P-384, or RSA of 2048 bits or more (what the broker's TLS takes). */
function keyProblem(spki: Buffer): string | undefined {
  let key: nodeCrypto.KeyObject;
  try { key = nodeCrypto.createPublicKey({ key: spki, format: 'der', type: 'spki' }); } catch { return 'unreadable public key'; }
  const details = key.asymmetricKeyDetails ?? {};
  if (key.asymmetricKeyType === 'ec') return ['prime256v1', 'secp384r1'].includes(details.namedCurve ?? '') ? undefined : `EC curve ${details.namedCurve} (use P-256 or P-384)`;
  if (key.asymmetricKeyType === 'rsa') return (details.modulusLength ?? 0) >= 2048 ? undefined : `RSA key of ${details.modulusLength} bits (at least 2048)`;
  return `${key.asymmetricKeyType} keys (use EC P-256, P-384 or RSA 2048+)`;
}

/** Serials compare as lower-case hex without leading zeros. */
const bareSerial = (hex: string) => hex.toLowerCase().replace(/^0+(?=.)/, '');
