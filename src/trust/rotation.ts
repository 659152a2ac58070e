import { z } from 'zod';
import type { CertificateUse, Gateway, ZodApp } from '../gateway.js';
import { invalid, notFound, refused } from '../lib/errors.js';
import type { CrlService } from './crl.js';
import { thingIdParams } from './schemas.js';

export const renewSchema = z.strictObject({ csr: z.string().min(1).max(16_384).describe('PEM PKCS#10 request for the new key pair') });
export const renewedSchema = z.strictObject({
  thingId: z.uuid(),
  certificate: z.string().describe('PEM; CN = thingId, signed by the device CA'),
  serial: z.string(),
  notAfter: z.string(),
  caCertificate: z.string(),
  caBundlePem: z.string(),
});

/**
 * Certificate rotation (issue 18, item 4). A device renews with a CSR while authenticated by its
 * current certificate; the new certificate is stored beside the old one with `awaiting_first_use`.
 * Both stay valid until the new one is first seen (broker CONNECT or the device-cert HTTP scheme):
 * then every other certificate of the thing is revoked and the CRL regenerated in one transaction,
 * the thing itself stays as it is. A device that lost the answer may renew again with its old
 * certificate; whichever new certificate it uses first wins and the others are revoked.
 */
export class CertificateRotation implements CertificateUse {
  constructor(private readonly gw: Gateway, private readonly crl: CrlService) {}

  async renew(thingId: string, csr: string): Promise<z.infer<typeof renewedSchema>> {
    const { pki, config } = this.gw;
    let spki: Buffer;
    try { spki = await pki.spkiFromCsr(csr); } catch { throw invalid('csr is not a PEM PKCS#10 request with a valid signature'); }
    const issued = await pki.signDeviceCertificate(thingId, spki, config.DEVICE_CERT_DAYS);
    await this.gw.sql.begin(async (tx) => {
      // share lock: a concurrent revocation either sees this certificate or is seen here
      const [thing] = await tx<{ revoked_at: Date | null }[]>`select revoked_at from things where id = ${thingId} for share`;
      if (!thing) throw notFound(`thing ${thingId} not found`);
      if (thing.revoked_at) throw refused(`thing ${thingId} is revoked; it cannot renew its certificate`);
      await tx`
        insert into device_certificates (serial, thing_id, pem, sealed_private_key, not_after, awaiting_first_use)
        values (${issued.serial}, ${thingId}, ${issued.pem}, null, ${issued.notAfter}, true)`;
    });
    return {
      thingId, certificate: issued.pem, serial: issued.serial, notAfter: issued.notAfter.toISOString(),
      caCertificate: pki.deviceCaPem, caBundlePem: pki.bundlePem,
    };
  }

  /** First use of a renewed certificate revokes the thing's others (CRL included); any other call changes nothing. */
  async used(thingId: string, serial: string): Promise<void> {
    const hex = serial.toLowerCase().replace(/^0+(?=.)/, '');
    // cheap miss first, outside a transaction: nothing of this thing awaits its first use (the usual connect)
    const [pending] = await this.gw.sql<{ serial: string }[]>`
      select serial from device_certificates
      where thing_id = ${thingId} and awaiting_first_use and not revoked and ltrim(serial, '0') = ${hex}`;
    if (!pending) return;
    const number = await this.gw.sql.begin(async (tx) => {
      // the thing's row serialises rotations of one thing (two new certificates used at once)
      await tx`select 1 from things where id = ${thingId} for update`;
      const [first] = await tx`
        update device_certificates set awaiting_first_use = false
        where serial = ${pending.serial} and awaiting_first_use and not revoked returning serial`;
      if (!first) return undefined;
      const revoked = await tx`
        update device_certificates set revoked = true, revoked_at = now()
        where thing_id = ${thingId} and serial <> ${pending.serial} and not revoked returning serial`;
      if (!revoked.length) return undefined;
      return (await this.crl.regenerate(tx)).number;
    });
    if (number !== undefined) await this.crl.announce(number);
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
