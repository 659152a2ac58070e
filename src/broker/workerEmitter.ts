import cluster, { type Worker } from 'node:cluster';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
// mqemitter's typings do not expose `_matcher` (read through aedesInternals.ts by matchCache.ts), so it is used untyped
const MQEmitter = require('mqemitter') as (opts?: object) => Emitter;

type Message = Record<string, unknown> & { topic: string };
type Listener = (message: Message, done: () => void) => void;
interface Emitter {
  on(topic: string, listener: Listener, done?: () => void): Emitter;
  removeListener(topic: string, listener: Listener, done?: () => void): Emitter;
  emit(message: Message, cb?: (err?: Error) => void): Emitter;
  close(cb: () => void): Emitter;
  closed: boolean;
}

/**
 * IPC messages of the worker emitter, relayed by the node:cluster primary (workers cannot talk to
 * each other directly). Tagged `mqx` so other IPC traffic (prom-client, start-up) passes by.
 *
 *   worker -> primary: hello | sub {topic, id} | unsub {topic} | msg {to, packet}
 *   primary -> worker: table {subs} | sub {from, topic, ack} | unsub {from, topic} | gone {from}
 *                      | subDone {id} | msg {packet}
 *   worker -> primary: applied {ack} (a remote subscription is in this worker's matcher)
 */
type Ipc =
  | { mqx: 'hello' }
  | { mqx: 'sub'; topic: string; id: number }
  | { mqx: 'unsub'; topic: string }
  | { mqx: 'msg'; to: number; packet: Message }
  | { mqx: 'applied'; ack: number }
  | { mqx: 'table'; subs: [number, string][] }
  | { mqx: 'sub'; from: number; topic: string; ack: number }
  | { mqx: 'unsub'; from: number; topic: string }
  | { mqx: 'gone'; from: number }
  | { mqx: 'subDone'; id: number }
  | { mqx: 'msg'; packet: Message };

const isIpc = (m: unknown): m is Ipc => typeof m === 'object' && m !== null && typeof (m as { mqx?: unknown }).mqx === 'string';

/** Marks an emitter whose matcher holds every listener that can receive a topic, on any worker (the fast lane may ask it). */
export const SEES_ALL_LISTENERS = Symbol('seesAllListeners');

/**
 * The Aedes emitter of one worker process of a multi-core node (BROKER_WORKERS > 1): an ordinary
 * in-process mqemitter whose topic matcher also holds, for each subscription made on another
 * worker, a forwarder that sends the message to that worker over IPC. So:
 *
 * - a message nobody else listens to stays in the worker (no IPC, no Redis): the fast lane keeps
 *   asking `hasListener` of this matcher and remains exact, since remote listeners are in it;
 * - a message with a listener on another worker (a command to a device connected there, a
 *   telemetry stream opened on another worker, a command reply, Aedes' `$SYS/+/new/clients`
 *   takeover notice) is sent there once per worker, however many of its subscriptions match;
 * - `on` calls back (Aedes then sends the SUBACK) only after every other worker has put the
 *   forwarder in its matcher, so a publish made anywhere after the SUBACK reaches the subscriber.
 *
 * A message that came from another worker is delivered to this worker's own listeners only (its
 * forwarders skip it: the sender already addressed every interested worker).
 */
export function workerEmitter(): Emitter & { [SEES_ALL_LISTENERS]: true } {
  if (!cluster.isWorker || !process.send) throw new Error('workerEmitter runs in a node:cluster worker');
  const send = (m: Ipc) => {
    // during shutdown the primary may already be gone: the message has nowhere to go
    if (process.connected) process.send!(m);
  };
  const mq = MQEmitter() as Emitter & { [SEES_ALL_LISTENERS]: true };
  const on = mq.on.bind(mq);
  const removeListener = mq.removeListener.bind(mq);
  const emit = mq.emit.bind(mq);

  /** messages received from another worker: local delivery only */
  const fromRemote = new WeakSet<object>();
  /** workers a message was already sent to (several of a worker's subscriptions may match one topic) */
  const sentTo = new WeakMap<object, Set<number>>();
  const forwarders = new Map<number, { listener: Listener; topics: Map<string, number> }>();
  const forwarder = (worker: number) => {
    let f = forwarders.get(worker);
    if (!f) {
      const listener: Listener = (message, done) => {
        if (!fromRemote.has(message)) {
          let sent = sentTo.get(message);
          if (!sent) sentTo.set(message, (sent = new Set()));
          if (!sent.has(worker)) {
            sent.add(worker);
            send({ mqx: 'msg', to: worker, packet: message });
          }
        }
        done();
      };
      forwarders.set(worker, (f = { listener, topics: new Map() }));
    }
    return f;
  };
  const addRemote = (worker: number, topic: string) => {
    const f = forwarder(worker);
    const n = f.topics.get(topic) ?? 0;
    f.topics.set(topic, n + 1);
    // one forwarder per worker and topic in the matcher (the count only guards against a repeat)
    if (n === 0) on(topic, f.listener);
  };
  const removeRemote = (worker: number, topic: string) => {
    const f = forwarders.get(worker);
    const n = f?.topics.get(topic);
    if (!f || !n) return;
    if (n > 1) return void f.topics.set(topic, n - 1);
    f.topics.delete(topic);
    removeListener(topic, f.listener);
  };

  /**
   * This worker's own listeners per topic; the other workers hear of the first and the last. By
   * listener, so that a repeated removal of one listener cannot withdraw another's subscription.
   */
  const local = new Map<string, { listeners: Map<Listener, number>; announced: Promise<void> }>();
  const waiting = new Map<number, () => void>();
  let nextId = 1;

  process.on('message', (m: unknown) => {
    if (!isIpc(m)) return;
    switch (m.mqx) {
      case 'table':
        for (const [from, topic] of m.subs) addRemote(from, topic);
        break;
      case 'sub':
        if ('from' in m) {
          addRemote(m.from, m.topic);
          send({ mqx: 'applied', ack: m.ack });
        }
        break;
      case 'unsub':
        if ('from' in m) removeRemote(m.from, m.topic);
        break;
      case 'gone': {
        const f = forwarders.get(m.from);
        if (f) for (const topic of f.topics.keys()) removeListener(topic, f.listener);
        forwarders.delete(m.from);
        break;
      }
      case 'subDone':
        waiting.get(m.id)?.();
        waiting.delete(m.id);
        break;
      case 'msg':
        if ('packet' in m && !('to' in m)) {
          const packet = reviveBuffers(m.packet);
          fromRemote.add(packet);
          emit(packet);
        }
        break;
    }
  });

  // Aedes subscribes and unsubscribes through these two, and sends the SUBACK on `done` (AEDES_SOURCE_USES in aedesInternals.ts)
  mq.on = (topic, listener, done) => {
    on(topic, listener);
    let entry = local.get(topic);
    if (!entry) {
      const id = nextId++;
      entry = { listeners: new Map(), announced: new Promise<void>((resolve) => waiting.set(id, resolve)) };
      local.set(topic, entry);
      if (process.connected) send({ mqx: 'sub', topic, id });
      else waiting.get(id)!();
    }
    entry.listeners.set(listener, (entry.listeners.get(listener) ?? 0) + 1);
    if (done) void entry.announced.then(() => setImmediate(done));
    return mq;
  };
  mq.removeListener = (topic, listener, done) => {
    const entry = local.get(topic);
    const n = entry?.listeners.get(listener) ?? 0;
    if (n > 1) entry!.listeners.set(listener, n - 1);
    else if (n === 1) entry!.listeners.delete(listener);
    if (entry && n > 0 && entry.listeners.size === 0) {
      local.delete(topic);
      // no wait: a message still forwarded meanwhile finds no listener here and is dropped
      send({ mqx: 'unsub', topic });
    }
    return removeListener(topic, listener, done);
  };
  mq[SEES_ALL_LISTENERS] = true;
  send({ mqx: 'hello' });
  return mq;
}

/**
 * IPC (advanced serialization: structured clone) turns Buffers into plain Uint8Arrays: Aedes and
 * mqtt-packet need Buffers for the payload and the binary MQTT 5 properties.
 */
function reviveBuffers(packet: Message): Message {
  const buf = (v: unknown) => (v instanceof Uint8Array && !Buffer.isBuffer(v) ? Buffer.from(v.buffer, v.byteOffset, v.byteLength) : v);
  packet.payload = buf(packet.payload);
  const props = packet.properties as Record<string, unknown> | undefined;
  if (props) for (const k of Object.keys(props)) props[k] = buf(props[k]);
  return packet;
}

/**
 * The primary's side: relays messages between workers and keeps every worker's subscriptions, so
 * a worker that starts (or restarts) gets the table, and a worker that exits is forgotten.
 */
export function relayWorkerEmitters(): void {
  const subs = new Map<number, Map<string, number>>();
  const live = new Set<number>();
  /** subscriptions waiting for the other workers' `applied` */
  const pending = new Map<number, { worker: number; id: number; awaiting: Set<number> }>();
  let nextAck = 1;
  const sendTo = (id: number, m: Ipc) => {
    const w = cluster.workers?.[id];
    if (w?.isConnected()) w.send(m);
  };
  const settle = (ack: number, from: number) => {
    const p = pending.get(ack);
    if (!p) return;
    p.awaiting.delete(from);
    if (p.awaiting.size === 0) {
      pending.delete(ack);
      sendTo(p.worker, { mqx: 'subDone', id: p.id });
    }
  };

  cluster.on('message', (worker: Worker, m: unknown) => {
    if (!isIpc(m)) return;
    const from = worker.id;
    switch (m.mqx) {
      case 'hello': {
        const table: [number, string][] = [];
        for (const [w, topics] of subs) if (w !== from) for (const [topic, n] of topics) for (let i = 0; i < n; i++) table.push([w, topic]);
        live.add(from);
        sendTo(from, { mqx: 'table', subs: table });
        break;
      }
      case 'sub': {
        if ('from' in m) break;
        const topics = subs.get(from) ?? new Map<string, number>();
        subs.set(from, topics);
        topics.set(m.topic, (topics.get(m.topic) ?? 0) + 1);
        const ack = nextAck++;
        const awaiting = new Set([...live].filter((w) => w !== from));
        pending.set(ack, { worker: from, id: m.id, awaiting: new Set(awaiting) });
        for (const w of awaiting) sendTo(w, { mqx: 'sub', from, topic: m.topic, ack });
        if (awaiting.size === 0) settle(ack, from);
        break;
      }
      case 'unsub': {
        if ('from' in m) break;
        const topics = subs.get(from);
        const n = topics?.get(m.topic);
        if (!topics || !n) break;
        if (n > 1) topics.set(m.topic, n - 1);
        else topics.delete(m.topic);
        for (const w of live) if (w !== from) sendTo(w, { mqx: 'unsub', from, topic: m.topic });
        break;
      }
      case 'applied':
        settle(m.ack, from);
        break;
      case 'msg':
        if ('to' in m) sendTo(m.to, { mqx: 'msg', packet: m.packet });
        break;
    }
  });

  cluster.on('exit', (worker) => {
    const gone = worker.id;
    live.delete(gone);
    subs.delete(gone);
    for (const w of live) sendTo(w, { mqx: 'gone', from: gone });
    // subscriptions waiting for the gone worker's answer need it no more
    for (const ack of [...pending.keys()]) settle(ack, gone);
  });
}
