import 'reflect-metadata';
import fs from 'node:fs';
import path from 'node:path';
import nodeCrypto from 'node:crypto';
import * as x509 from '@peculiar/x509';
import type { Pki } from '../pki/pki.js';
import { toPem } from '../pki/pki.js';

type CryptoKey = nodeCrypto.webcrypto.CryptoKey;
const webcrypto = nodeCrypto.webcrypto as unknown as nodeCrypto.webcrypto.Crypto;
const RSA_SIGN = { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' } as const;
const VALID_MS = 7 * 86_400_000;
const RENEW_AFTER_MS = 86_400_000;

/**
 * Node's TLS turns on CRL checking for the WHOLE chain (OpenSSL CRL_CHECK | CRL_CHECK_ALL) as soon
 * as one CRL is loaded, so the device CA certificate needs a CRL from the root too, or every
 * handshake fails with UNABLE_TO_GET_CRL. This is that (empty) root CRL, signed with the root key
 * from CERTS_DIR and renewed daily. Without the root key (root kept offline) it is undefined and
 * the broker enforces revocation in `authenticate` only (revoked serials of the device CA's CRL).
 */
export class RootCrl {
  private current?: { pem: string; at: number };

  private constructor(private readonly pki: Pki, private readonly key: CryptoKey) {}

  static async load(pki: Pki, certsDir: string): Promise<RootCrl | undefined> {
    const file = path.join(certsDir, 'root-ca.key');
    if (!fs.existsSync(file)) return undefined;
    const der = Buffer.from(fs.readFileSync(file, 'utf8').replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
    const key = await webcrypto.subtle.importKey('pkcs8', der, RSA_SIGN, false, ['sign']);
    return new RootCrl(pki, key);
  }

  async pem(): Promise<string> {
    if (this.current && Date.now() - this.current.at < RENEW_AFTER_MS) return this.current.pem;
    const now = new Date();
    const crl = await x509.X509CrlGenerator.create({
      issuer: this.pki.rootCert.subject,
      thisUpdate: now,
      nextUpdate: new Date(now.getTime() + VALID_MS),
      signingKey: this.key,
      signingAlgorithm: RSA_SIGN,
      entries: [],
      extensions: [await x509.AuthorityKeyIdentifierExtension.create(this.pki.rootCert, false, webcrypto)],
    }, webcrypto);
    this.current = { pem: toPem(Buffer.from(crl.rawData), 'X509 CRL'), at: now.getTime() };
    return this.current.pem;
  }
}
