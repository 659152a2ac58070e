import 'reflect-metadata';
import nodeCrypto from 'node:crypto';
import * as x509 from '@peculiar/x509';

type CryptoKey = nodeCrypto.webcrypto.CryptoKey;
const webcrypto = nodeCrypto.webcrypto as unknown as nodeCrypto.webcrypto.Crypto;
const RSA_SIGN = { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' } as const;
const DAY = 86_400_000;
const VALID_DAYS = 7;

/**
 * The root CA's CRL (empty: the root revokes nothing but the device CA, which would mean a new
 * PKI). Published at /api/v1/certificates/root-crl so that `openssl verify -crl_check_all` can
 * check the whole chain, and loaded into the broker's TLS context: Node turns on CRL checking for
 * every chain level as soon as one CRL is loaded.
 *
 * thisUpdate is the start of the current UTC day, the CRL number that day's index, and RSA
 * PKCS#1 v1.5 is deterministic: every node signs the very same bytes, with no shared state. A
 * new CRL is signed each day and is valid 7 days. CRL times are the system's (OpenSSL checks them).
 */
export class RootCrl {
  private current?: { day: number; der: Buffer };

  constructor(private readonly rootCert: x509.X509Certificate, private readonly key: CryptoKey) {}

  static async fromPem(rootCert: x509.X509Certificate, keyPem: string): Promise<RootCrl> {
    const der = Buffer.from(keyPem.replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
    return new RootCrl(rootCert, await webcrypto.subtle.importKey('pkcs8', der, RSA_SIGN, false, ['sign']));
  }

  async der(now = new Date()): Promise<Buffer> {
    const day = Math.floor(now.getTime() / DAY);
    if (this.current?.day === day) return this.current.der;
    const crl = await x509.X509CrlGenerator.create({
      issuer: this.rootCert.subject,
      thisUpdate: new Date(day * DAY),
      nextUpdate: new Date((day + VALID_DAYS) * DAY),
      signingKey: this.key,
      signingAlgorithm: RSA_SIGN,
      entries: [],
      extensions: [
        await x509.AuthorityKeyIdentifierExtension.create(this.rootCert, false, webcrypto),
        new x509.Extension('2.5.29.20', false, integerDer(day)),
      ],
    }, webcrypto);
    this.current = { day, der: Buffer.from(crl.rawData) };
    return this.current.der;
  }
}

/** A DER INTEGER (positive) for the CRL number extension. */
export function integerDer(n: number): ArrayBuffer {
  let hex = n.toString(16);
  if (hex.length % 2) hex = '0' + hex;
  if (parseInt(hex.slice(0, 2), 16) & 0x80) hex = '00' + hex;
  const body = Buffer.from(hex, 'hex');
  const der = Buffer.concat([Buffer.from([0x02, body.length]), body]);
  return der.buffer.slice(der.byteOffset, der.byteOffset + der.byteLength) as ArrayBuffer;
}
