import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { calculateJwkThumbprint, exportJWK, type JWK } from 'jose';

/**
 * Key files kept beside the CA material in CERTS_DIR (shared by every node). A `*.previous.*`
 * file is the key an operator rotated out: still accepted (licenses, sealed values), never used
 * to sign or seal. See docs/decisions.md, "Keys and their rotation".
 */
export const KEY_FILES = {
  license: 'license-signing.key', licensePrevious: 'license-signing.previous.key',
  sealing: 'sealing.key', sealingPrevious: 'sealing.previous.key',
  blacklist: 'blacklist-signing.key', blacklistPrevious: 'blacklist-signing.previous.key',
} as const;

/** Writes a secret file atomically (temp file + rename): a node reading the folder never sees half a key. */
export function writeSecretFile(file: string, content: string): void {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, content, { mode: 0o600 });
  fs.renameSync(tmp, file);
}

function readIfExists(dir: string, name: string): string | undefined {
  const file = path.join(dir, name);
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : undefined;
}

/** Creates the missing key files (call under the PKI advisory lock). */
export function generateKeyFiles(dir: string): void {
  for (const name of [KEY_FILES.license, KEY_FILES.blacklist]) {
    if (fs.existsSync(path.join(dir, name))) continue;
    const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    writeSecretFile(path.join(dir, name), privateKey.export({ type: 'pkcs8', format: 'pem' }) as string);
  }
  if (!fs.existsSync(path.join(dir, KEY_FILES.sealing))) {
    writeSecretFile(path.join(dir, KEY_FILES.sealing), crypto.randomBytes(32).toString('base64') + '\n');
  }
}

export const keyFilesMissing = (dir: string) => [KEY_FILES.license, KEY_FILES.sealing, KEY_FILES.blacklist].some((name) => !fs.existsSync(path.join(dir, name)));

export interface LicenseVerifyKey { kid: string; publicKey: crypto.KeyObject; jwk: JWK }
export interface LicenseJwk { kty: 'EC'; crv: 'P-256'; x: string; y: string; kid: string; alg: 'ES256'; use: 'sig' }

/**
 * The license-signing key (EC P-256, ES256), separate from the device CA. Its `kid` is the RFC
 * 7638 thumbprint, so every node derives the same one from the shared file with nothing to store.
 */
export class LicenseKeys {
  private constructor(
    readonly privateKey: crypto.KeyObject,
    readonly kid: string,
    /** current first, then the previous key while it exists */
    readonly verifyKeys: LicenseVerifyKey[],
    /** device CA public key: licenses signed before this key existed (RS256, no kid), valid until they expire */
    readonly legacyPublicKey: crypto.KeyObject,
  ) {}

  static async load(dir: string, deviceCaPublicKey: crypto.KeyObject): Promise<LicenseKeys> {
    const privateKey = ecKey(dir, KEY_FILES.license)!;
    const previous = ecKey(dir, KEY_FILES.licensePrevious);
    const verifyKeys = await Promise.all([privateKey, ...(previous ? [previous] : [])].map(async (k) => {
      const publicKey = crypto.createPublicKey(k);
      const jwk = await exportJWK(publicKey);
      return { kid: await calculateJwkThumbprint(jwk), publicKey, jwk };
    }));
    return new LicenseKeys(privateKey, verifyKeys[0].kid, verifyKeys, deviceCaPublicKey);
  }

  /** The public keys as a JWKS, current first. */
  get jwks(): { keys: LicenseJwk[] } {
    return { keys: this.verifyKeys.map((k) => ({ kty: 'EC', crv: 'P-256', x: k.jwk.x!, y: k.jwk.y!, kid: k.kid, alg: 'ES256', use: 'sig' })) };
  }

  /**
   * The key a license header names: ES256 with one of our kids, or RS256 without kid (signed
   * by the device CA before the upgrade). Anything else is refused, so no algorithm confusion.
   */
  verificationKey(header: { alg?: string; kid?: string }): crypto.KeyObject {
    if (header.kid !== undefined) {
      const key = this.verifyKeys.find((k) => k.kid === header.kid);
      if (key && header.alg === 'ES256') return key.publicKey;
    } else if (header.alg === 'RS256') {
      return this.legacyPublicKey;
    }
    throw new Error('license is signed by an unknown key');
  }
}

/**
 * An ES256 signing key of its own (the identity-blacklist snapshot key): the current key signs,
 * the previous one (while its file exists) is still published so signatures made before a
 * rotation verify. `kid` is the RFC 7638 thumbprint, derived alike on every node.
 */
export class Es256Keys {
  private constructor(readonly privateKey: crypto.KeyObject, readonly kid: string, readonly verifyKeys: LicenseVerifyKey[]) {}

  static async load(dir: string, current: string, previous: string): Promise<Es256Keys> {
    const privateKey = ecKey(dir, current)!;
    const old = ecKey(dir, previous);
    const verifyKeys = await Promise.all([privateKey, ...(old ? [old] : [])].map(async (k) => {
      const publicKey = crypto.createPublicKey(k);
      const jwk = await exportJWK(publicKey);
      return { kid: await calculateJwkThumbprint(jwk), publicKey, jwk };
    }));
    return new Es256Keys(privateKey, verifyKeys[0].kid, verifyKeys);
  }

  /** The public keys as a JWKS, current first. */
  get jwks(): { keys: LicenseJwk[] } {
    return { keys: this.verifyKeys.map((k) => ({ kty: 'EC', crv: 'P-256', x: k.jwk.x!, y: k.jwk.y!, kid: k.kid, alg: 'ES256', use: 'sig' })) };
  }
}

function ecKey(dir: string, name: string): crypto.KeyObject | undefined {
  const pem = readIfExists(dir, name);
  if (pem === undefined) return undefined;
  const key = crypto.createPrivateKey(pem);
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1') throw new Error(`${name} in CERTS_DIR must be an EC P-256 private key`);
  return key;
}

/** Sealing keys: the current one (32 random bytes), the rotated-out one, and the legacy derived one. */
export interface SealingKeys {
  current: Buffer;
  previous?: Buffer;
  /** HKDF of the device CA key: how values were sealed before sealing.key existed */
  legacy: Buffer;
}

export function loadSealingKeys(dir: string, legacy: Buffer): SealingKeys {
  const parse = (text: string | undefined, name: string) => {
    if (text === undefined) return undefined;
    const key = Buffer.from(text.trim(), 'base64');
    if (key.length !== 32) throw new Error(`${name} in CERTS_DIR must hold 32 bytes, base64`);
    return key;
  };
  return {
    current: parse(readIfExists(dir, KEY_FILES.sealing), KEY_FILES.sealing)!,
    previous: parse(readIfExists(dir, KEY_FILES.sealingPrevious), KEY_FILES.sealingPrevious),
    legacy,
  };
}
