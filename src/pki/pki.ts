import 'reflect-metadata';
import fs from 'node:fs';
import path from 'node:path';
import nodeCrypto from 'node:crypto';
import * as x509 from '@peculiar/x509';
import type { Sql } from '../db/client.js';
import * as der from './der.js';
import { Es256Keys, generateKeyFiles, KEY_FILES, keyFilesMissing, LicenseKeys, loadSealingKeys, writeSecretFile, type SealingKeys } from './keys.js';
import { integerDer, RootCrl } from './rootCrl.js';

type Crypto = nodeCrypto.webcrypto.Crypto;
type CryptoKey = nodeCrypto.webcrypto.CryptoKey;
type CryptoKeyPair = nodeCrypto.webcrypto.CryptoKeyPair;
const webcrypto = nodeCrypto.webcrypto as unknown as Crypto;
x509.cryptoProvider.set(webcrypto);

const RSA_SIGN = { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' } as const;
const RSA_GEN = { ...RSA_SIGN, publicExponent: new Uint8Array([1, 0, 1]), modulusLength: 2048 };
const EC_GEN = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const PKI_LOCK = 7_211_043;
const DAY = 86_400_000;
const SHA256_WITH_RSA = der.sequence(der.oid('1.2.840.113549.1.1.11'), Buffer.from([0x05, 0x00]));
const OID_CN = der.oid('2.5.4.3');
const OID_SKI = der.oid('2.5.29.14');

const FILES = {
  rootCert: 'root-ca.crt', rootKey: 'root-ca.key',
  deviceCaCert: 'device-ca.crt', deviceCaKey: 'device-ca.key',
  serverCert: 'server.crt', serverKey: 'server.key',
  bundle: 'ca-bundle.pem',
} as const;

export interface PkiOptions {
  dir: string;
  /** broker host names for the server certificate SAN */
  serverNames: string[];
  /** `${PUBLIC_BASE_URL}/api/v1/certificates/crl` */
  crlUrl: string;
  /** `${PUBLIC_BASE_URL}/api/v1/certificates/root-crl`: the CRL distribution point of a newly generated device CA */
  rootCrlUrl?: string;
}

export function toPem(der: ArrayBuffer | Buffer, label: string): string {
  const b64 = Buffer.from(der as ArrayBuffer).toString('base64').replace(/(.{64})/g, '$1\n').replace(/\n$/, '');
  return `-----BEGIN ${label}-----\n${b64}\n-----END ${label}-----\n`;
}

async function exportKeyPem(key: CryptoKey): Promise<string> {
  return toPem(await webcrypto.subtle.exportKey('pkcs8', key), 'PRIVATE KEY');
}

function randomSerial(): string {
  const bytes = nodeCrypto.randomBytes(16);
  bytes[0] &= 0x7f; // positive INTEGER
  if (bytes[0] === 0) bytes[0] = 1;
  return bytes.toString('hex');
}

/**
 * The gateway's CA hierarchy: root CA -> device CA (RSA-2048; signs device certificates and the
 * CRL); the broker's server certificate is signed by the root. Beside it, keys of their own: the
 * license-signing key and the sealing key (src/pki/keys.ts). All kept in `CERTS_DIR`, generated on
 * first start under a Postgres advisory lock so that nodes sharing the folder never race.
 * Signing is native (WebCrypto through @peculiar/x509), never pure-JS RSA.
 */
export class Pki {
  private constructor(
    readonly options: PkiOptions,
    readonly rootCert: x509.X509Certificate,
    readonly deviceCaCert: x509.X509Certificate,
    private readonly deviceCaKey: CryptoKey,
    /** PEM of the broker server certificate and key (for the TLS listener) */
    readonly serverCertPem: string,
    readonly serverKeyPem: string,
    /** DER pieces every device certificate shares: issuer Name and the constant extensions */
    private readonly template: { issuer: Buffer; extensions: Buffer; caKey: nodeCrypto.KeyObject },
    /** signs device licenses (ES256); not the device CA */
    readonly licenseKeys: LicenseKeys,
    /** seals the secrets the gateway reads back (src/pki/sealer.ts) */
    readonly sealingKeys: SealingKeys,
    /** signs identity-blacklist snapshots (ES256); published at /api/v1/identity-blacklist/jwks.json */
    readonly blacklistKeys: Es256Keys,
    /** undefined when the root key is kept offline (no root-ca.key in CERTS_DIR) */
    readonly rootCrl: RootCrl | undefined,
  ) {
    // encoded once: every enrollment answers with them (re-encoding was 20 µs per enrollment)
    this.rootPem = rootCert.toString('pem') + '\n';
    this.deviceCaPem = deviceCaCert.toString('pem') + '\n';
    this.bundlePem = this.deviceCaPem + this.rootPem;
  }

  readonly rootPem: string;
  readonly deviceCaPem: string;
  /** device CA then root: the full chain a device needs */
  readonly bundlePem: string;

  static async ensure(sql: Sql, options: PkiOptions): Promise<Pki> {
    const file = (k: keyof typeof FILES) => path.join(options.dir, FILES[k]);
    const caMissing = () => !fs.existsSync(file('deviceCaKey')) || !fs.existsSync(file('serverKey'));
    if (caMissing() || keyFilesMissing(options.dir)) {
      await sql.begin(async (tx) => {
        await tx`select pg_advisory_xact_lock(${PKI_LOCK})`;
        if (caMissing()) await generate(options);
        // an installation from before these keys gets them on its next start
        generateKeyFiles(options.dir);
      });
    }
    const read = (k: keyof typeof FILES) => fs.readFileSync(file(k), 'utf8');
    const rootCert = new x509.X509Certificate(read('rootCert'));
    const deviceCaCert = new x509.X509Certificate(read('deviceCaCert'));
    const deviceCaKey = await importRsaKey(read('deviceCaKey'));
    const template = {
      issuer: Buffer.from(deviceCaCert.subjectName.toArrayBuffer()),
      extensions: Buffer.concat([
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth]),
        new x509.CRLDistributionPointsExtension([options.crlUrl]),
        await x509.AuthorityKeyIdentifierExtension.create(deviceCaCert, false, webcrypto),
      ].map((e) => Buffer.from(e.rawData))),
      caKey: nodeCrypto.createPrivateKey(read('deviceCaKey')),
    };
    // what sealed secrets before sealing.key existed; kept only to open (and re-seal) those values
    const legacySealingKey = Buffer.from(nodeCrypto.hkdfSync('sha256', template.caKey.export({ type: 'pkcs8', format: 'der' }), Buffer.alloc(0), 'device-gateway/trust-sealed-secrets', 32));
    return new Pki(
      options, rootCert, deviceCaCert, deviceCaKey, read('serverCert'), read('serverKey'), template,
      await LicenseKeys.load(options.dir, nodeCrypto.createPublicKey(template.caKey)),
      loadSealingKeys(options.dir, legacySealingKey),
      await Es256Keys.load(options.dir, KEY_FILES.blacklist, KEY_FILES.blacklistPrevious),
      fs.existsSync(file('rootKey')) ? await RootCrl.fromPem(rootCert, read('rootKey')) : undefined,
    );
  }

  /**
   * A fresh EC P-256 key pair: SPKI DER and PKCS#8 PEM. The key comes from OpenSSL through ECDH
   * (about 30 µs) and its two encodings are fixed prefixes around the raw bytes: OpenSSL's own
   * encoders (generateKeyPair with publicKeyEncoding and privateKeyEncoding) took 180 µs of CPU per
   * key, most of a claim enrollment's key cost (docs/benchmarks.md).
   */
  generateDeviceKeyPair(): { spki: Buffer; privateKeyPem: string } {
    return der.p256KeyPair();
  }

  /** Verifies a PEM CSR's self-signature and returns its SubjectPublicKeyInfo DER; its subject is ignored. */
  async spkiFromCsr(pem: string): Promise<Buffer> {
    return (await this.parseCsr(pem)).spki;
  }

  /** The CSR's public key (SPKI DER) and subject CN, once its signature verifies; throws otherwise. */
  async parseCsr(pem: string): Promise<{ spki: Buffer; commonName: string | undefined }> {
    const csr = new x509.Pkcs10CertificateRequest(pem);
    if (!(await csr.verify(webcrypto))) throw new Error('CSR signature does not verify');
    const commonName = csr.subjectName.getField('CN')[0];
    return { spki: Buffer.from(csr.publicKey.rawData), commonName };
  }

  /**
   * Device certificate (CN = thingId, DS + KE, clientAuth, CRL distribution point, AKI/SKI,
   * random 128-bit serial), as DER assembled from the pre-encoded constant parts and signed with
   * native RSA off the event loop: about 10x faster than building it through WebCrypto.
   */
  async signDeviceCertificate(thingId: string, spki: Buffer, days: number): Promise<{ pem: string; serial: string; notAfter: Date }> {
    const serial = randomSerial();
    const notBefore = new Date(Math.floor(Date.now() / 1000) * 1000 - 5 * 60_000);
    const notAfter = new Date(notBefore.getTime() + days * DAY);
    const publicKeyBits = subjectPublicKeyBits(spki);
    const ski = der.sequence(OID_SKI, der.octetString(der.octetString(nodeCrypto.createHash('sha1').update(publicKeyBits).digest())));
    const tbs = der.sequence(
      der.explicit(0, Buffer.from([0x02, 0x01, 0x02])),
      der.integerFromHex(serial),
      SHA256_WITH_RSA,
      this.template.issuer,
      der.sequence(der.time(notBefore), der.time(notAfter)),
      der.sequence(der.set(der.sequence(OID_CN, der.utf8String(thingId)))),
      spki,
      der.explicit(3, der.sequence(this.template.extensions, ski)),
    );
    const signature = await new Promise<Buffer>((resolve, reject) =>
      nodeCrypto.sign('sha256', tbs, this.template.caKey, (err, sig) => (err ? reject(err) : resolve(sig))));
    const cert = der.sequence(tbs, SHA256_WITH_RSA, der.bitString(signature));
    return { pem: toPem(cert, 'CERTIFICATE'), serial, notAfter };
  }

  /** CRL signed by the device CA. `pem` uses the `X509 CRL` label Node's TLS expects. */
  async createCrl(entries: { serial: string; revokedAt: Date }[], crlNumber: number, nextUpdateSeconds: number): Promise<{ der: Buffer; pem: string }> {
    const now = new Date();
    const crl = await x509.X509CrlGenerator.create({
      issuer: this.deviceCaCert.subject,
      thisUpdate: now,
      nextUpdate: new Date(now.getTime() + nextUpdateSeconds * 1000),
      signingKey: this.deviceCaKey,
      signingAlgorithm: RSA_SIGN,
      entries: entries.map((e) => ({ serialNumber: e.serial, revocationDate: e.revokedAt, reason: x509.X509CrlReason.cessationOfOperation })),
      extensions: [
        await x509.AuthorityKeyIdentifierExtension.create(this.deviceCaCert, false, webcrypto),
        new x509.Extension('2.5.29.20', false, integerDer(crlNumber)),
      ],
    }, webcrypto);
    const der = Buffer.from(crl.rawData);
    return { der, pem: toPem(der, 'X509 CRL') };
  }
}

/** The subjectPublicKey BIT STRING contents (without the unused-bits byte) of an SPKI, for the SKI. */
function subjectPublicKeyBits(spki: Buffer): Buffer {
  // SPKI = SEQUENCE { AlgorithmIdentifier, BIT STRING }: skip the outer header and the algorithm.
  let i = headerLength(spki, 0);
  i += headerLength(spki, i) + contentLength(spki, i);
  const start = i + headerLength(spki, i) + 1;
  return spki.subarray(start, i + headerLength(spki, i) + contentLength(spki, i));
}

function headerLength(buf: Buffer, at: number): number {
  const first = buf[at + 1];
  return first < 0x80 ? 2 : 2 + (first & 0x7f);
}

function contentLength(buf: Buffer, at: number): number {
  const first = buf[at + 1];
  if (first < 0x80) return first;
  let n = 0;
  for (let k = 0; k < (first & 0x7f); k++) n = n * 256 + buf[at + 2 + k];
  return n;
}

async function importRsaKey(pem: string): Promise<CryptoKey> {
  const der = Buffer.from(pem.replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
  return webcrypto.subtle.importKey('pkcs8', der, RSA_SIGN, true, ['sign']);
}

async function generate(options: PkiOptions): Promise<void> {
  fs.mkdirSync(options.dir, { recursive: true });
  const now = Date.now();
  const root = (await webcrypto.subtle.generateKey(RSA_GEN, true, ['sign', 'verify'])) as CryptoKeyPair;
  const rootCert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    name: 'CN=Device Gateway Root CA, O=Device Gateway',
    notBefore: new Date(now - DAY),
    notAfter: new Date(now + 20 * 365 * DAY),
    keys: root,
    signingAlgorithm: RSA_SIGN,
    extensions: [
      new x509.BasicConstraintsExtension(true, 1, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(root.publicKey, false, webcrypto),
    ],
  }, webcrypto);
  const device = (await webcrypto.subtle.generateKey(RSA_GEN, true, ['sign', 'verify'])) as CryptoKeyPair;
  const deviceCert = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: 'CN=Device Gateway Device CA, O=Device Gateway',
    issuer: rootCert.subject,
    notBefore: new Date(now - DAY),
    notAfter: new Date(now + 10 * 365 * DAY),
    publicKey: device.publicKey,
    signingKey: root.privateKey,
    signingAlgorithm: RSA_SIGN,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign | x509.KeyUsageFlags.digitalSignature, true),
      await x509.SubjectKeyIdentifierExtension.create(device.publicKey, false, webcrypto),
      await x509.AuthorityKeyIdentifierExtension.create(rootCert, false, webcrypto),
      ...(options.rootCrlUrl ? [new x509.CRLDistributionPointsExtension([options.rootCrlUrl])] : []),
    ],
  }, webcrypto);
  const server = (await webcrypto.subtle.generateKey(EC_GEN, true, ['sign', 'verify'])) as CryptoKeyPair;
  const names = [...new Set(['localhost', ...options.serverNames])];
  const ipRe = /^(\d{1,3}\.){3}\d{1,3}$|:/;
  const serverCert = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: `CN=${options.serverNames[0] ?? 'localhost'}, O=Device Gateway`,
    issuer: rootCert.subject,
    notBefore: new Date(now - DAY),
    notAfter: new Date(now + 2 * 365 * DAY),
    publicKey: server.publicKey,
    signingKey: root.privateKey,
    signingAlgorithm: RSA_SIGN,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyAgreement, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([
        ...names.filter((n) => !ipRe.test(n)).map((value) => ({ type: 'dns' as const, value })),
        ...['127.0.0.1', '::1', ...names.filter((n) => ipRe.test(n))].map((value) => ({ type: 'ip' as const, value })),
      ]),
      await x509.AuthorityKeyIdentifierExtension.create(rootCert, false, webcrypto),
    ],
  }, webcrypto);
  const write = (k: keyof typeof FILES, text: string, secret = false) => secret
    ? writeSecretFile(path.join(options.dir, FILES[k]), text)
    : fs.writeFileSync(path.join(options.dir, FILES[k]), text, { mode: 0o644 });
  // Keys last: their presence marks a complete PKI.
  write('rootCert', rootCert.toString('pem') + '\n');
  write('deviceCaCert', deviceCert.toString('pem') + '\n');
  write('serverCert', serverCert.toString('pem') + '\n');
  write('bundle', deviceCert.toString('pem') + '\n' + rootCert.toString('pem') + '\n');
  write('rootKey', await exportKeyPem(root.privateKey), true);
  write('serverKey', await exportKeyPem(server.privateKey), true);
  write('deviceCaKey', await exportKeyPem(device.privateKey), true);
}
