/**
 * Opaque cursors of the identity blacklist. A delta cursor names a position in the change log
 * (`seq`: every change up to it is reflected); a page cursor names the last (model, sn) listed.
 * Both are base64url text so clients keep them as they are.
 */
const DELTA = /^bl1:(0|[1-9][0-9]{0,15})$/;

export function deltaCursor(seq: number): string {
  return Buffer.from(`bl1:${seq}`).toString('base64url');
}

/** The seq a delta cursor names, or undefined when it is not one of ours. */
export function readDeltaCursor(cursor: string): number | undefined {
  if (!/^[A-Za-z0-9_-]{1,40}$/.test(cursor)) return undefined;
  const m = DELTA.exec(Buffer.from(cursor, 'base64url').toString('latin1'));
  return m ? Number(m[1]) : undefined;
}

export function pageCursor(last: { model: string; sn: string }): string {
  return Buffer.from(JSON.stringify([last.model, last.sn])).toString('base64url');
}

export function readPageCursor(cursor: string): { model: string; sn: string } | undefined {
  try {
    const v = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(v) && v.length === 2 && typeof v[0] === 'string' && typeof v[1] === 'string') return { model: v[0], sn: v[1] };
  } catch {
    // not ours
  }
  return undefined;
}
