import type { Client } from 'aedes';
import { clientInternals, PlainBufferList } from './aedesInternals.js';

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
  const parser = clientInternals(client)._parser;
  if (!PlainBufferList || parser._list.length !== 0) return false;
  parser._list = new PlainBufferList();
  return true;
}
