import { createRequire } from 'node:module';
import type { Client } from 'aedes';

interface BufferListClass { new (): { length: number } }

/**
 * The plain `BufferList` class of the `bl` package that mqtt-packet itself loads (resolved from
 * mqtt-packet's own location, so it is the same copy), or undefined if it is not there.
 */
const PlainBufferList: BufferListClass | undefined = (() => {
  try {
    const fromHere = createRequire(import.meta.url);
    const list = createRequire(fromHere.resolve('mqtt-packet'))('bl') as { BufferList?: BufferListClass };
    return typeof list.BufferList === 'function' ? list.BufferList : undefined;
  } catch {
    return undefined;
  }
})();

/**
 * mqtt-packet's parser keeps the bytes it has not parsed yet in a `bl` BufferListStream, a Duplex
 * stream (readable and writable states, listeners) that it only ever uses as a plain list (append,
 * length, readUInt8/16/32, slice, toString, consume: all methods of `BufferList`, which the stream
 * mixes in). One idle MQTT session keeps its parser for life, so the plain list is lighter per
 * connection (issue 19, docs/decisions.md). Swapped only while the list is empty (right after
 * `aedes.handle`, before any byte arrived), so nothing is lost or reordered. After a parse error
 * mqtt-packet makes itself a stream list again (`_resetState`); the connection is closing then.
 * Returns whether the list was swapped.
 */
export function usePlainParserList(client: Client): boolean {
  const parser = (client as unknown as { _parser?: { _list?: { length: number; append?: unknown } } })._parser;
  if (!PlainBufferList || !parser?._list || parser._list.length !== 0 || typeof parser._list.append !== 'function') return false;
  parser._list = new PlainBufferList();
  return true;
}
