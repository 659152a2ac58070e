import crypto from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { p256Encodings, p256KeyPair } from '../../src/pki/der.js';

describe('device key pairs (p256KeyPair: OpenSSL key, encodings built here)', () => {
  it('gives the bytes OpenSSL itself would write, for the public and the private key, over many keys', () => {
    for (let i = 0; i < 2000; i++) {
      const { spki, privateKeyPem } = p256KeyPair();
      const key = crypto.createPrivateKey(privateKeyPem);
      expect(key.asymmetricKeyDetails).toEqual({ namedCurve: 'prime256v1' });
      expect(key.export({ type: 'pkcs8', format: 'pem' })).toBe(privateKeyPem);
      expect(crypto.createPublicKey(key).export({ type: 'spki', format: 'der' }).equals(spki)).toBe(true);
    }
  });

  it('pads a scalar OpenSSL hands back shorter than 32 bytes (one key in 256)', () => {
    let ecdh = crypto.createECDH('prime256v1');
    for (let i = 0; i < 100_000 && (ecdh.generateKeys(), ecdh.getPrivateKey().length === 32); i++) ecdh = crypto.createECDH('prime256v1');
    expect(ecdh.getPrivateKey().length).toBeLessThan(32);
    const { spki, privateKeyPem } = p256Encodings(ecdh.getPublicKey(), ecdh.getPrivateKey());
    const key = crypto.createPrivateKey(privateKeyPem);
    expect(key.export({ type: 'pkcs8', format: 'pem' })).toBe(privateKeyPem);
    expect(crypto.createPublicKey(key).export({ type: 'spki', format: 'der' }).equals(spki)).toBe(true);
  });

  it('signs what the public key verifies, and openssl reads the private key', () => {
    const { spki, privateKeyPem } = p256KeyPair();
    const signature = crypto.sign('sha256', Buffer.from('telemetry'), privateKeyPem);
    expect(crypto.verify('sha256', Buffer.from('telemetry'), crypto.createPublicKey({ key: spki, format: 'der', type: 'spki' }), signature)).toBe(true);
    const text = execFileSync('openssl', ['pkey', '-noout', '-text'], { input: privateKeyPem }).toString();
    expect(text).toContain('NIST CURVE: P-256');
  });
});
