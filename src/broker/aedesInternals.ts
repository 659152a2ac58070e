import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Duplex } from 'node:stream';
import { pathToFileURL } from 'node:url';
import type { Aedes, AedesPublishPacket, Client, PublishPacket } from 'aedes';

/**
 * The broker's contract with Aedes' internals, in one place: every private field or method of
 * Aedes, its Client, mqtt-packet's parser and mqemitter that src/broker relies on (and what
 * patches/aedes+2.0.0-beta.1.patch adds), with typed views of them. No other broker file reaches
 * into an Aedes object. `checkAedesContract` runs at broker start-up against the real instance and
 * a probe client; test/broker/aedesContract.test.ts runs it too and also checks, in Aedes' source,
 * the uses of those members the broker depends on (AEDES_SOURCE_USES). An Aedes upgrade that
 * moves any of them fails at start-up and in the test, naming the member and the installed version.
 *
 * The views are plain casts (identity), taken once per connection or instance, so the fast lane's
 * per-message reads stay the same property reads as before (no wrapper per message).
 */

/** the Aedes version the broker and the patch are written for (package.json pins it) */
export const AEDES_WRITTEN_FOR = '2.0.0-beta.1';
export const AEDES_PATCH = `patches/aedes+${AEDES_WRITTEN_FOR}.patch`;

/** mqtt-packet's parser as the fast lane drives it */
export interface ParserInternals {
  parse(buf: Buffer): number;
  /** the bytes not parsed yet (a `bl` list; parserList.ts swaps in the plain one) */
  _list: ParserList;
  /** the parse step (0: between packets) */
  _stateCounter: number;
  /** set by a parse error (until the next parse resets the parser) */
  error: unknown;
}

export interface ParserList { length: number; append(buf: Buffer): unknown }

/** Node's Timeout behind Aedes' keep-alive */
export interface KeepaliveTimer { refresh(): unknown }

/** What the broker reads and writes of an Aedes Client beyond its typings. */
export interface ClientInternals {
  /** CONNACK written: the lane takes packets only after it */
  connackSent: boolean;
  connected: boolean;
  version: number;
  /** packets handed to Aedes whose handling has not finished (Aedes reads on when it is 0) */
  _parsingBatch: number;
  /** 1.5 x keep-alive in ms, -1 without keep-alive */
  _keepaliveInterval: number;
  _keepaliveTimer: KeepaliveTimer | null;
  _parser: ParserInternals;
  /** the session's subscriptions by topic filter */
  subscriptions: Record<string, { qos: number }>;
  /** the patch's Receive Maximum window: ids in flight, sends waiting for room */
  receiveMaximum: number;
  _inflight: Set<number>;
  _waitingSends: unknown[];
}

/** mqemitter's topic trie (qlobber) */
export interface Matcher {
  add(topic: string, value: unknown): unknown;
  remove(topic: string, value?: unknown): unknown;
  match(topic: string): unknown[];
}

type AedesPublish = (packet: AedesPublishPacket, client?: unknown, done?: unknown) => void;

interface AedesInstanceInternals {
  /** the emitter Aedes routes every message through (mqemitter, mqemitter-redis or workerEmitter.ts) */
  mq: unknown;
  /** client ids whose session a new connection is taking over (aedes.js registerClient) */
  _takingOver: Set<string>;
  publish: AedesPublish;
}

/** A Client's internals (the same object, typed): take it once per connection, not per message. */
export const clientInternals = (client: Client): ClientInternals => client as unknown as ClientInternals;

/** The emitter Aedes routes messages through. */
export const aedesEmitter = (aedes: Aedes): unknown => (aedes as unknown as AedesInstanceInternals).mq;

/** An mqemitter's topic trie, or undefined for an emitter without one. */
export const emitterMatcher = (emitter: unknown): Matcher | undefined => (emitter as { _matcher?: Matcher } | null)?._matcher;

/** Is a new connection of `clientId` taking over this node's session of it? */
export const isTakingOver = (aedes: Aedes, clientId: string): boolean => (aedes as unknown as AedesInstanceInternals)._takingOver.has(clientId);

/** The subscriptions of a client's session, by topic filter. */
export const clientSubscriptions = (client: Client): Record<string, { qos: number }> => clientInternals(client).subscriptions;

/**
 * QoS 1/2 messages this client can be sent now without passing the Receive Maximum it announced
 * (MQTT 5, 3.3.4): its window less what is in flight and what already waits for room (the patch).
 */
export function sendQuota(client: Client): number {
  const w = clientInternals(client);
  return w.receiveMaximum - w._inflight.size - w._waitingSends.length;
}

/** Tells Aedes not to acknowledge nor publish this packet (the flag its own refusal sets: lib/handlers/publish.js). */
export function markNotAuthorized(packet: PublishPacket): void {
  (packet as PublishPacket & { _notAuthorized?: boolean })._notAuthorized = true;
}

/** Replaces this instance's `publish` (which Aedes also calls for its own `$SYS` announcements). */
export function wrapPublish(aedes: Aedes, wrap: (publish: AedesPublish) => AedesPublish): void {
  const a = aedes as unknown as AedesInstanceInternals;
  a.publish = wrap(a.publish.bind(aedes) as AedesPublish);
}

interface BufferListClass { new (): ParserList }

/**
 * The plain `BufferList` class of the `bl` package that mqtt-packet itself loads (resolved from
 * mqtt-packet's own location, so it is the same copy), or undefined if it is not there.
 */
export const PlainBufferList: BufferListClass | undefined = (() => {
  try {
    const fromHere = createRequire(import.meta.url);
    const list = createRequire(fromHere.resolve('mqtt-packet'))('bl') as { BufferList?: BufferListClass };
    return typeof list.BufferList === 'function' ? list.BufferList : undefined;
  } catch {
    return undefined;
  }
})();

// ---------------------------------------------------------------------------------------------
// The contract, checked at start-up

/** where a member lives */
export type ContractOwner = 'Aedes' | 'Client' | 'parser' | 'parser list' | 'emitter' | 'matcher' | 'bl' | 'aedes/lib/utils.js';
export type ContractKind = 'function' | 'number' | 'boolean' | 'object' | 'object or null' | 'Set' | 'Array' | 'field';

export interface ContractMember {
  owner: ContractOwner;
  name: string;
  kind: ContractKind;
  /** added by the Aedes patch (not in upstream Aedes) */
  patch?: true;
  /** what relies on it */
  usedBy: string;
}

/** Every private member of Aedes and its parts the broker relies on. */
export const AEDES_CONTRACT: readonly ContractMember[] = [
  { owner: 'Aedes', name: 'mq', kind: 'object', usedBy: 'the topic match cache (matchCache.ts) and the fast lane\'s listener check' },
  { owner: 'Aedes', name: '_takingOver', kind: 'Set', usedBy: 'Broker.isTakenOver (a takeover is no disconnect)' },
  { owner: 'Aedes', name: 'publish', kind: 'function', usedBy: 'replaced on the instance on a single node (skipOwnClientAnnouncements in broker.ts)' },
  { owner: 'Client', name: 'connackSent', kind: 'boolean', usedBy: 'the fast lane (takes packets only after CONNACK)' },
  { owner: 'Client', name: 'connected', kind: 'boolean', usedBy: 'the fast lane' },
  { owner: 'Client', name: '_parsingBatch', kind: 'number', usedBy: 'the fast lane (packets still in Aedes\' hands: order)' },
  { owner: 'Client', name: '_keepaliveInterval', kind: 'number', usedBy: 'the fast lane\'s keep-alive sweep' },
  { owner: 'Client', name: '_keepaliveTimer', kind: 'object or null', usedBy: 'the fast lane\'s keep-alive sweep' },
  { owner: 'Client', name: '_parser', kind: 'object', usedBy: 'the fast lane (parse replaced) and parserList.ts' },
  { owner: 'Client', name: 'subscriptions', kind: 'object', usedBy: 'offline commands (the QoS of the command topic)' },
  { owner: 'Client', name: 'receiveMaximum', kind: 'number', usedBy: 'sendQuota (offline commands within the Receive Maximum)' },
  { owner: 'Client', name: '_inflight', kind: 'Set', patch: true, usedBy: 'sendQuota (the Receive Maximum window)' },
  { owner: 'Client', name: '_waitingSends', kind: 'Array', patch: true, usedBy: 'sendQuota (the Receive Maximum window)' },
  { owner: 'Client', name: 'sendInWindow', kind: 'function', patch: true, usedBy: 'Aedes itself: QoS 1/2 sends within the Receive Maximum' },
  { owner: 'Client', name: 'releaseInWindow', kind: 'function', patch: true, usedBy: 'Aedes itself: PUBACK/PUBCOMP free a slot of the window' },
  { owner: 'parser', name: 'parse', kind: 'function', usedBy: 'the fast lane (replaced per connection)' },
  { owner: 'parser', name: '_list', kind: 'object', usedBy: 'the fast lane (bytes Aedes has not parsed) and parserList.ts (swapped)' },
  { owner: 'parser', name: '_stateCounter', kind: 'number', usedBy: 'the fast lane (the parser between packets)' },
  { owner: 'parser', name: 'error', kind: 'field', usedBy: 'the fast lane (no lane after a parse error)' },
  { owner: 'parser list', name: 'length', kind: 'number', usedBy: 'the fast lane and parserList.ts' },
  { owner: 'parser list', name: 'append', kind: 'function', usedBy: 'parserList.ts (a list mqtt-packet can use)' },
  { owner: 'bl', name: 'BufferList', kind: 'function', usedBy: 'parserList.ts (the plain list, lighter per session)' },
  { owner: 'emitter', name: '_matcher', kind: 'object', usedBy: 'the topic match cache (matchCache.ts)' },
  { owner: 'matcher', name: 'add', kind: 'function', usedBy: 'the topic match cache (wrapped)' },
  { owner: 'matcher', name: 'remove', kind: 'function', usedBy: 'the topic match cache (wrapped)' },
  { owner: 'matcher', name: 'match', kind: 'function', usedBy: 'the topic match cache (wrapped)' },
  { owner: 'aedes/lib/utils.js', name: 'forEachItem', kind: 'function', patch: true, usedBy: 'Aedes itself: queues drained without stream.pipeline at connect' },
];

/**
 * How Aedes (and the packages it loads) must use those members for the broker to hold, read from
 * their source by test/broker/aedesContract.test.ts (not at start-up: a member can be checked on a
 * live object, a use only in the code). `file` is relative to the package's folder.
 */
export const AEDES_SOURCE_USES: readonly { pkg: 'aedes' | 'mqemitter'; file: string; uses: string | RegExp; why: string }[] = [
  { pkg: 'aedes', file: 'lib/client.js', uses: 'client._parser.parse(buf)', why: 'the fast lane replaces `parse` on the parser instance: Aedes must call it through the instance' },
  { pkg: 'aedes', file: 'lib/client.js', uses: 'const buf = client.conn.read(null)', why: 'what the lane passes on is pushed into the socket, where Aedes reads it' },
  { pkg: 'aedes', file: 'lib/client.js', uses: 'if (that._parsingBatch <= 0)', why: 'Aedes reads on only once the packets it was handed are handled (the lane waits for the same)' },
  { pkg: 'aedes', file: 'lib/handlers/index.js', uses: 'client._keepaliveTimer.refresh()', why: 'the keep-alive timer the lane\'s sweep refreshes is the one Aedes refreshes' },
  { pkg: 'aedes', file: 'lib/handlers/publish.js', uses: 'if (packet._notAuthorized)', why: 'markNotAuthorized: a refused payload is neither acknowledged nor published by Aedes' },
  { pkg: 'aedes', file: 'aedes.js', uses: 'this._takingOver.add(client.id)', why: 'isTakingOver' },
  { pkg: 'aedes', file: 'aedes.js', uses: /this\.publish\(\{\s*topic: \$SYS_PREFIX \+ this\.id \+ '\/new\/clients'/, why: 'the $SYS announcements go through the instance\'s publish (wrapPublish drops them on a single node)' },
  { pkg: 'aedes', file: 'aedes.js', uses: 'this.mq.on(topic, func, done)', why: 'workerEmitter.ts: a subscription reaches the emitter through `on`, and the SUBACK waits for its callback' },
  { pkg: 'aedes', file: 'aedes.js', uses: 'this.mq.removeListener(topic, func, done)', why: 'workerEmitter.ts: an unsubscription reaches the emitter through `removeListener`' },
  { pkg: 'mqemitter', file: 'mqemitter.js', uses: 'this._matcher.match(message.topic)', why: 'matchCache.ts wraps the matcher\'s methods on the instance: the emitter must call them through it' },
  { pkg: 'mqemitter', file: 'mqemitter.js', uses: 'this._matcher.add(topic, notify)', why: 'matchCache.ts: a subscribe empties the cache' },
  { pkg: 'mqemitter', file: 'mqemitter.js', uses: 'that._matcher.remove(topic, notify)', why: 'matchCache.ts: an unsubscribe empties the cache' },
];

/** The folder of an installed package, found from its entry point (`aedes` does not export its package.json). */
export function packageDir(name: string, from: string = import.meta.url): string {
  const main = createRequire(from).resolve(name);
  const marker = `${path.sep}node_modules${path.sep}${name}${path.sep}`;
  return main.slice(0, main.lastIndexOf(marker) + marker.length - 1);
}

/** the installed Aedes' version (node_modules/aedes/package.json) */
export function installedAedesVersion(): string {
  try {
    return (JSON.parse(fs.readFileSync(path.join(packageDir('aedes'), 'package.json'), 'utf8')) as { version?: string }).version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** The objects the contract's members are looked for on. */
export type ContractTargets = Record<ContractOwner, object | undefined>;

/**
 * The real objects: the Aedes instance, a probe Client it makes on a stream that never connects
 * (closed again at once: no CONNECT, no session, no event), that client's parser and its list,
 * Aedes' emitter and its matcher, `bl` as mqtt-packet loads it, and the patched lib/utils.js.
 */
export async function contractTargets(aedes: Aedes): Promise<ContractTargets> {
  const probe = aedes.handle(new Duplex({ read() {}, write(_chunk, _encoding, callback) { callback(); } }));
  // Client.close removes no member (it nulls the keep-alive timer and empties the window)
  probe.close();
  const parser = own(probe, '_parser');
  const emitter = own(aedes, 'mq');
  let utils: object | undefined;
  try {
    utils = (await import(pathToFileURL(path.join(packageDir('aedes'), 'lib', 'utils.js')).href)) as object;
  } catch {
    utils = undefined;
  }
  return {
    Aedes: aedes,
    Client: probe,
    parser,
    'parser list': own(parser, '_list'),
    emitter,
    matcher: own(emitter, '_matcher'),
    bl: PlainBufferList ? { BufferList: PlainBufferList } : {},
    'aedes/lib/utils.js': utils,
  };
}

const own = (o: object | undefined, key: string): object | undefined => {
  const v = o === undefined ? undefined : (o as Record<string, unknown>)[key];
  return typeof v === 'object' && v !== null ? v : undefined;
};

function hasKind(value: unknown, kind: ContractKind): boolean {
  switch (kind) {
    case 'field': return true;
    case 'object': return typeof value === 'object' && value !== null;
    case 'object or null': return value === null || typeof value === 'object';
    case 'Set': return value instanceof Set;
    case 'Array': return Array.isArray(value);
    default: return typeof value === kind;
  }
}

/** The members missing (or of another kind) on `targets`, described. */
export function contractGaps(targets: ContractTargets, members: readonly ContractMember[] = AEDES_CONTRACT): string[] {
  const gaps: string[] = [];
  for (const m of members) {
    const target = targets[m.owner];
    const present = target !== undefined && m.name in target;
    if (present && hasKind((target as Record<string, unknown>)[m.name], m.kind)) continue;
    const kind = `${/^[aeiou]/i.test(m.kind) ? 'an' : 'a'} ${m.kind}`;
    const what = present ? `is not ${kind}` : `is missing (${kind})`;
    gaps.push(`${m.owner}.${m.name} ${what}${m.patch ? `, added by ${AEDES_PATCH}` : ''}; used by ${m.usedBy}`);
  }
  return gaps;
}

export class AedesContractError extends Error {
  constructor(readonly version: string, readonly gaps: string[]) {
    super(
      `Aedes ${version} (installed, node_modules/aedes) lacks what the MQTT broker relies on:\n` +
      gaps.map((g) => `  - ${g}\n`).join('') +
      `The broker is written for aedes ${AEDES_WRITTEN_FOR} with ${AEDES_PATCH} (patches/README.md). ` +
      'If the patch was not applied, reinstall (`npm install`: patch-package applies it). After an Aedes upgrade, ' +
      'remake the patch for the new version and update src/broker/aedesInternals.ts and the code using each member above.',
    );
    this.name = 'AedesContractError';
  }
}

/** Throws an AedesContractError naming every member of `members` missing on `targets`. */
export function verifyContract(targets: ContractTargets, members: readonly ContractMember[] = AEDES_CONTRACT): void {
  const gaps = contractGaps(targets, members);
  if (gaps.length > 0) throw new AedesContractError(installedAedesVersion(), gaps);
}

/** Broker start-up: every member the broker relies on is on this Aedes instance and its clients (else AedesContractError). */
export async function checkAedesContract(aedes: Aedes, members: readonly ContractMember[] = AEDES_CONTRACT): Promise<void> {
  verifyContract(await contractTargets(aedes), members);
}
