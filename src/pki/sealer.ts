import crypto from 'node:crypto';
import type { Sql } from '../db/client.js';
import type { SealingKeys } from './keys.js';

const VERSION = 0x01;
const PREFIX_LENGTH = 5;

/** 0x01 | the first 4 bytes of SHA-256(key): which key sealed a value, without revealing it. */
const prefixOf = (key: Buffer) => Buffer.concat([Buffer.from([VERSION]), crypto.createHash('sha256').update(key).digest().subarray(0, 4)]);

/**
 * AES-256-GCM sealing for the few secrets the gateway must read back (a model's symmetric group
 * key and webhook secret: HMACs are recomputed with them; a server-generated device key, returned
 * again on an idempotent re-claim). Layout: 5-byte key prefix | 12-byte nonce | 16-byte tag |
 * ciphertext. Values sealed before sealing.key existed have no prefix and open with the legacy
 * key derived from the device CA; `resealAll` moves every value to the current key.
 */
export class Sealer {
  readonly prefix: Buffer;
  private readonly byPrefix: Map<string, Buffer>;

  constructor(private readonly keys: SealingKeys) {
    this.prefix = prefixOf(keys.current);
    this.byPrefix = new Map([keys.current, ...(keys.previous ? [keys.previous] : [])].map((k) => [prefixOf(k).toString('hex'), k]));
  }

  seal(plain: string): Buffer {
    const iv = crypto.randomBytes(12);
    const cipher = crypto.createCipheriv('aes-256-gcm', this.keys.current, iv);
    const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
    return Buffer.concat([this.prefix, iv, cipher.getAuthTag(), body]);
  }

  /** Opens with the key the prefix names, else as a legacy value; GCM's tag tells a wrong key. */
  open(sealed: Buffer): string {
    const key = this.byPrefix.get(sealed.subarray(0, PREFIX_LENGTH).toString('hex'));
    if (key) {
      const plain = decrypt(key, sealed.subarray(PREFIX_LENGTH));
      if (plain !== undefined) return plain;
    }
    const legacy = decrypt(this.keys.legacy, sealed);
    if (legacy !== undefined) return legacy;
    throw new Error('a sealed value opens with none of the sealing keys (sealing.key, sealing.previous.key, legacy)');
  }

}

function decrypt(key: Buffer, body: Buffer): string | undefined {
  if (body.length < 28) return undefined;
  try {
    const decipher = crypto.createDecipheriv('aes-256-gcm', key, body.subarray(0, 12));
    decipher.setAuthTag(body.subarray(12, 28));
    return Buffer.concat([decipher.update(body.subarray(28)), decipher.final()]).toString('utf8');
  } catch {
    return undefined;
  }
}

/** A column of sealed values: its table and primary key. */
export interface SealedColumn {
  table: string;
  key: string;
  column: string;
}

/**
 * Re-seals with the current key every value sealed with another one (legacy derived key, or
 * sealing.previous.key after a rotation). Each domain runs it at start for its own sealed columns, on every node: it finds nothing once done.
 * Batches by primary key; each update is conditional on the value it read, so a value rewritten
 * meanwhile is left alone. A value no key opens is counted and left as it is.
 */
export async function resealAll(sql: Sql, sealer: Sealer, columns: readonly SealedColumn[], batch = 500): Promise<{ resealed: number; unreadable: number }> {
  let resealed = 0;
  let unreadable = 0;
  for (const { table, key, column } of columns) {
    let after: string | undefined;
    for (;;) {
      const rows: { id: string; sealed: Buffer }[] = await sql`
        select ${sql(key)} as id, ${sql(column)} as sealed from ${sql(table)}
        where ${sql(column)} is not null and substring(${sql(column)} from 1 for ${PREFIX_LENGTH}) <> ${sealer.prefix}
          ${after === undefined ? sql`` : sql`and ${sql(key)} > ${after}`}
        order by ${sql(key)} limit ${batch}`;
      for (const row of rows) {
        let plain: string;
        try { plain = sealer.open(row.sealed); } catch { unreadable++; continue; }
        const done = await sql`update ${sql(table)} set ${sql(column)} = ${sealer.seal(plain)} where ${sql(key)} = ${row.id} and ${sql(column)} = ${row.sealed}`;
        resealed += done.count;
      }
      if (rows.length < batch) break;
      after = rows[rows.length - 1].id;
    }
  }
  return { resealed, unreadable };
}
