import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Sealer } from '../../src/pki/sealer.js';

const key = () => crypto.randomBytes(32);

/** The format before sealing.key: nonce | tag | ciphertext, no key prefix. */
function sealLegacy(k: Buffer, plain: string): Buffer {
  const iv = crypto.randomBytes(12);
  const cipher = crypto.createCipheriv('aes-256-gcm', k, iv);
  const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]);
}

describe('Sealer', () => {
  it('opens what it sealed; each seal is a fresh nonce; the plaintext does not show', () => {
    const sealer = new Sealer({ current: key(), legacy: key() });
    const a = sealer.seal('whsec_secret');
    const b = sealer.seal('whsec_secret');
    expect(a.equals(b)).toBe(false);
    expect(a.includes(Buffer.from('whsec_secret'))).toBe(false);
    expect(a.subarray(0, 5).equals(sealer.prefix)).toBe(true);
    expect(sealer.open(a)).toBe('whsec_secret');
  });

  it('opens values of the previous key and of the legacy derived key, and refuses a value of any other key or a tampered one', () => {
    const previous = key();
    const legacy = key();
    const sealer = new Sealer({ current: key(), previous, legacy });
    expect(sealer.open(new Sealer({ current: previous, legacy }).seal('old'))).toBe('old');
    expect(sealer.open(sealLegacy(legacy, 'older'))).toBe('older');
    expect(() => sealer.open(new Sealer({ current: key(), legacy: key() }).seal('x'))).toThrow(/none of the sealing keys/);
    expect(() => sealer.open(sealLegacy(key(), 'x'))).toThrow(/none of the sealing keys/);
    const tampered = sealer.seal('value');
    tampered[tampered.length - 1] ^= 1;
    expect(() => sealer.open(tampered)).toThrow(/none of the sealing keys/);
    // without the previous key, its values no longer open
    expect(() => new Sealer({ current: key(), legacy }).open(new Sealer({ current: previous, legacy }).seal('old'))).toThrow();
  });
});
