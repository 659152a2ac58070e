import { describe, expect, it } from 'vitest';
import pino from 'pino';
import { ConnectivityLog, chunks, type ConnectivityChange } from '../../src/broker/connectivityLog.js';

const change = (state: ConnectivityChange['state'], thingId: string, sessionId: string): ConnectivityChange => ({ state, thingId, sessionId, at: 0 });

describe('connectivity log', () => {
  it('cuts a batch where a thing comes again, keeping the order', () => {
    const batch = [change('connected', 'a', '1'), change('connected', 'b', '2'), change('disconnected', 'a', '1'), change('connected', 'c', '3'), change('connected', 'a', '4'), change('disconnected', 'b', '2')];
    expect(chunks(batch).map((c) => c.map((x) => `${x.state[0]}${x.thingId}${x.sessionId}`))).toEqual([['ca1', 'cb2'], ['da1', 'cc3'], ['ca4', 'db2']]);
    expect(chunks([])).toEqual([]);
  });

  it('writes in batches, one after the other, and goes on after a failed chunk', async () => {
    const written: string[][] = [];
    let release!: () => void;
    const first = new Promise<void>((r) => (release = r));
    const log = new ConnectivityLog(async (chunk) => {
      if (written.length === 0) await first;
      written.push(chunk.map((c) => c.thingId));
      if (chunk.some((c) => c.thingId === 'bad')) throw new Error('refused');
    }, pino({ level: 'silent' }));
    log.add(change('connected', 'a', '1'));
    const flushed = log.flush();
    await new Promise((r) => setImmediate(r)); // the first batch is taken and being written
    // while the first batch is written, the next ones gather
    log.add(change('connected', 'b', '2'));
    log.add(change('connected', 'bad', '3'));
    log.add(change('disconnected', 'b', '2'));
    log.add(change('connected', 'c', '4'));
    release();
    await flushed;
    await log.flush();
    expect(written).toEqual([['a'], ['b', 'bad'], ['b', 'c']]);
  });

  it('a read of one thing waits for its unwritten changes only', async () => {
    const written: string[] = [];
    const log = new ConnectivityLog(async (chunk) => void written.push(...chunk.map((c) => c.thingId)), pino({ level: 'silent' }));
    await log.written('a'); // nothing of it: no write
    expect(written).toEqual([]);
    log.add(change('connected', 'a', '1'));
    await log.written('a');
    expect(written).toEqual(['a']);
    await log.written('a'); // written already
    expect(written).toEqual(['a']);
  });
});
