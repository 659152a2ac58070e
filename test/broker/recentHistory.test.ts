import { describe, expect, it } from 'vitest';
import { compareTx, RecentHistory } from '../../src/broker/recentHistory.js';

const MiB = 1024 * 1024;
const text = (b: Buffer | undefined) => b?.toString('utf8');
/** adds a row whose points are `points` */
const add = (recent: RecentHistory, tx: string, thing: string, points: string) =>
  recent.add(tx, thing, Buffer.byteLength(points), (target, at) => void target.write(points, at));

describe('RecentHistory (the rows a node wrote last, for the log readers at its head)', () => {
  it('keeps nothing until a reader reads, then keeps rows by transaction and thing, byte for byte', () => {
    let now = 1_000;
    const recent = new RecentHistory(8 * MiB, () => now);
    expect(recent.wanted).toBe(false);
    expect(recent.covers('10')).toBe(false); // nothing kept: a read goes to PostgreSQL
    recent.touch('9'); // a reader after transaction 9: rows are kept from here
    expect(recent.wanted).toBe(true);
    add(recent, '10', 'a', '[[1,{"t":"☃ é"}]]');
    add(recent, '10', 'b', '[[2,{"v":2}]]');
    add(recent, '11', 'a', '[[3,{"v":3}]]');
    expect(text(recent.get('10', 'a'))).toBe('[[1,{"t":"☃ é"}]]');
    expect(text(recent.get('10', 'b'))).toBe('[[2,{"v":2}]]');
    expect(text(recent.get('11', 'a'))).toBe('[[3,{"v":3}]]');
    expect(recent.get('11', 'b')).toBeUndefined();
    expect(recent.get('12', 'a')).toBeUndefined();
    expect(recent.covers('8')).toBe(false); // a reader behind the position keeping began at would miss rows
    expect(recent.covers('9')).toBe(true);
    expect(recent.covers('100')).toBe(true);
    // 30 s without a read: not wanted, and the memory is given back
    now += 30_000;
    expect(recent.wanted).toBe(false);
    expect(recent.size).toBe(0);
    expect(recent.covers('10')).toBe(false);
  });

  it('uses its memory as a ring: the oldest slab\'s rows go when it is needed again, and what it covers moves on', () => {
    const recent = new RecentHistory(16 * MiB); // two slabs of 8 MiB
    recent.touch('0');
    const row = 'x'.repeat(MiB); // eight rows a slab
    for (let tx = 1; tx <= 16; tx++) add(recent, String(tx), 't', row);
    expect(recent.size).toBe(16);
    expect(recent.covers('1')).toBe(true);
    add(recent, '17', 't', row); // the first slab again: rows 1 to 8 go
    expect(recent.get('8', 't')).toBeUndefined();
    expect(text(recent.get('9', 't'))).toBe(row);
    expect(text(recent.get('17', 't'))).toBe(row);
    expect(recent.size).toBe(9);
    expect(recent.covers('7')).toBe(false); // a reader after 7 would miss 8
    expect(recent.covers('8')).toBe(true);
  });

  it('a transaction whose rows run over into the next slab: each row found whole; forgotten whole when its first slab is used again', () => {
    const recent = new RecentHistory(24 * MiB); // three slabs of 8 MiB
    recent.touch('0');
    const row = (c: string) => c.repeat(3 * MiB); // two rows a slab
    // slabs: [1/a, 1/b], [1/c, 2/d], [2/e, 3/f]: transactions 1 and 2 each run over into the next slab
    for (const t of ['a', 'b', 'c']) add(recent, '1', t, row(t));
    for (const t of ['d', 'e']) add(recent, '2', t, row(t));
    add(recent, '3', 'f', row('f'));
    expect(['a', 'b', 'c'].map((t) => text(recent.get('1', t)) === row(t))).toEqual([true, true, true]);
    expect([text(recent.get('2', 'd')) === row('d'), text(recent.get('2', 'e')) === row('e')]).toEqual([true, true]);
    expect(recent.get('1', 'd')).toBeUndefined();
    expect(recent.size).toBe(6);
    add(recent, '4', 'g', row('g')); // the first slab again: transaction 1 goes, its row in the second slab too
    expect(['a', 'b', 'c'].map((t) => recent.get('1', t))).toEqual([undefined, undefined, undefined]);
    expect(['d', 'e'].map((t) => text(recent.get('2', t)) === row(t))).toEqual([true, true]);
    expect(text(recent.get('4', 'g'))).toBe(row('g'));
    expect(recent.size).toBe(4);
    expect(recent.covers('1')).toBe(true); // a reader after all of 1 misses nothing kept
    expect(recent.covers('0')).toBe(false);
  });

  it('a slab holds at most 16,384 rows, however small (the index costs heap per row): the ring moves on by count too', () => {
    const recent = new RecentHistory(16 * MiB); // two slabs
    recent.touch('0');
    const slabRows = 16_384;
    for (let i = 1; i <= 2 * slabRows; i++) add(recent, String(Math.ceil(i / 50)), `t${i % 50}`, '[[1,{"v":1}]]');
    expect(recent.size).toBe(2 * slabRows);
    expect(text(recent.get('1', 't1'))).toBe('[[1,{"v":1}]]');
    // one row more: the first slab (16,384 rows in about 200 KB of its 8 MiB) is used again
    const next = String(Math.ceil(2 * slabRows / 50) + 1);
    add(recent, next, 't0', '[[2,{"v":2}]]');
    expect(recent.get('1', 't1')).toBeUndefined();
    expect(text(recent.get(next, 't0'))).toBe('[[2,{"v":2}]]');
    expect(recent.covers('1')).toBe(false);
    expect(recent.size).toBeLessThanOrEqual(slabRows + 1);
    expect(recent.size).toBeGreaterThan(slabRows - 50); // the second slab's rows, less those of a transaction that ran over
  });

  it('a row larger than half a slab (4 MiB) is not kept (it is read from PostgreSQL); 0 MiB keeps nothing', () => {
    const recent = new RecentHistory(16 * MiB);
    recent.touch('0');
    add(recent, '0', 'large', 'x'.repeat(4 * MiB));
    expect(recent.get('0', 'large')?.length).toBe(4 * MiB);
    add(recent, '1', 'big', 'x'.repeat(4 * MiB + 1));
    expect(recent.get('1', 'big')).toBeUndefined();
    const none = new RecentHistory(0);
    none.touch('0');
    expect(none.wanted).toBe(false);
  });

  it('settled: waits for the history writes under way when asked (failed ones too), not for later ones', async () => {
    const recent = new RecentHistory(16 * MiB);
    await recent.settled(); // none under way
    let finish!: () => void;
    let fail!: (err: Error) => void;
    recent.track(new Promise<void>((r) => (finish = r)));
    recent.track(new Promise<void>((_, r) => (fail = r)));
    let settled = false;
    const waiting = recent.settled().then(() => void (settled = true));
    finish();
    await new Promise((r) => setImmediate(r));
    expect(settled).toBe(false); // the failing one is still under way
    recent.track(new Promise<void>(() => {})); // a write that starts later is not waited for
    fail(new Error('refused'));
    await waiting;
    expect(settled).toBe(true);
  });

  it('orders transaction ids as numbers', () => {
    expect(compareTx('9', '10')).toBeLessThan(0);
    expect(compareTx('10', '9')).toBeGreaterThan(0);
    expect(compareTx('123', '123')).toBe(0);
    expect(compareTx('18446744073709551615', '18446744073709551614')).toBeGreaterThan(0);
  });
});
