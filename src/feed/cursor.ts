import crypto from 'node:crypto';
import { gone, invalid } from '../lib/errors.js';
import { safeEqual } from '../lib/encoding.js';

/** Feed cursors live 72 hours from issue (spec document 2, Limits). */
export const CURSOR_LIFETIME_MS = 72 * 3600_000;

/**
 * A place in the state-change log: every change at or before (xid, seq) was served. The log is
 * ordered by the writing transaction (xid8), then seq; see migration 0900.
 */
export interface Position {
  xid: bigint;
  seq: bigint;
}

export const START: Position = { xid: 0n, seq: 0n };
const MAX_SEQ = (1n << 63n) - 1n;

/** Everything written by a transaction below `xmin` (the horizon): the position after all of it. */
export const horizonPosition = (xmin: bigint): Position => ({ xid: xmin - 1n, seq: MAX_SEQ });

export const after = (a: Position, b: Position): boolean => a.xid > b.xid || (a.xid === b.xid && a.seq > b.seq);

/** Who a cursor was issued to: a cursor of one account (or registrar) means nothing to another. */
export interface Scope {
  accountId: string;
  /** set for a registrar-bound factory service: only the things of the models that registrar serves */
  registrarId: string | null;
}

const VERSION = 1;
const BODY = 1 + 8 + 8 + 8; // version | xid | seq | issued at (ms)
const MAC = 16;

const malformed = (why: string) =>
  invalid(`since: ${why}; resume from the next_cursor of an earlier page, or omit since to start from the beginning`, { code: 'THM-50110', type: 'feed-cursor-malformed', title: 'Malformed cursor' });

/**
 * Opaque, tamper-evident cursors: the position, the time of issue (72-hour lifetime) and an
 * HMAC over both and the scope, keyed from the gateway's sealing key (so every node reads what
 * any node issued; after a sealing-key rotation the previous key still verifies). base64url.
 */
export class Cursors {
  private readonly keys: Buffer[];

  constructor(sealingKeys: { current: Buffer; previous?: Buffer }) {
    this.keys = [sealingKeys.current, ...(sealingKeys.previous ? [sealingKeys.previous] : [])].map(
      (k) => Buffer.from(crypto.hkdfSync('sha256', k, Buffer.alloc(0), 'state-change-feed cursor v1', 32)),
    );
  }

  issue(p: Position, scope: Scope, at: Date): string {
    const body = Buffer.alloc(BODY);
    body.writeUInt8(VERSION, 0);
    body.writeBigUInt64BE(p.xid, 1);
    body.writeBigUInt64BE(p.seq, 9);
    body.writeBigUInt64BE(BigInt(at.getTime()), 17);
    return Buffer.concat([body, this.mac(this.keys[0], body, scope)]).toString('base64url');
  }

  /** The position of a cursor this gateway issued to `scope`; THM-50110 (400) or THM-50120 (410). */
  read(cursor: string, scope: Scope, now: Date): Position {
    if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw malformed('the cursor is not base64url');
    const raw = Buffer.from(cursor, 'base64url');
    if (raw.length !== BODY + MAC || raw.readUInt8(0) !== VERSION) throw malformed('the cursor is not one this feed issued');
    const body = raw.subarray(0, BODY);
    const presented = raw.subarray(BODY);
    if (!this.keys.some((k) => safeEqual(this.mac(k, body, scope), presented))) {
      throw malformed('the cursor was altered, or was issued to another account or registrar');
    }
    const issuedAt = Number(body.readBigUInt64BE(17));
    if (now.getTime() - issuedAt > CURSOR_LIFETIME_MS) {
      throw gone(`the cursor was issued at ${new Date(issuedAt).toISOString()}, more than 72 hours ago; do a full sync with GET /provisioning/v1/things (its first page gives a feed_cursor) and resume the feed from there`, {
        code: 'THM-50120', type: 'feed-cursor-expired', title: 'Cursor expired', extra: { full_sync: '/provisioning/v1/things' },
      });
    }
    return { xid: body.readBigUInt64BE(1), seq: body.readBigUInt64BE(9) };
  }

  private mac(key: Buffer, body: Buffer, scope: Scope): Buffer {
    return crypto.createHmac('sha256', key).update(body).update(`|${scope.accountId}|${scope.registrarId ?? ''}`).digest().subarray(0, MAC);
  }
}
