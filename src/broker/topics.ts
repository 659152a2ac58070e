/**
 * Device topics, all under `devices/{thingId}/` (the spec fixes only the prefix; names recorded in
 * docs/decisions.md). `from` says who publishes: devices may not publish on gateway-owned topics.
 */
export const TOPICS = {
  /** gateway -> subscribers: `{ state: 'connected' | 'disconnected', at, node }`, retained */
  lifecycle: { suffix: 'lifecycle', from: 'gateway' },
  /** device -> gateway: any payload; updates last seen */
  heartbeat: { suffix: 'heartbeat', from: 'device' },
  /** device -> gateway: JSON object of values; latest kept per key, streamed to tenants (other payloads refused, payload.ts) */
  telemetry: { suffix: 'telemetry', from: 'device' },
  /** device -> gateway: JSON object, the reported state (replaces it; version + 1; other payloads refused) */
  twinReported: { suffix: 'twin/reported', from: 'device' },
  /** gateway -> device: `{ version, desired }`, published on change and whenever the device subscribes */
  twinDesired: { suffix: 'twin/desired', from: 'gateway' },
  /** gateway -> device: `{ id, name, payload }` with MQTT 5 response topic and correlation data */
  commands: { suffix: 'commands', from: 'gateway' },
  /** device -> gateway: the JSON reply, with the request's correlation data (or `{ id }` in MQTT 3.1.1; other payloads refused) */
  commandResponse: { suffix: 'commands/response', from: 'device' },
  /** device -> gateway: `{ csr, requestId? }`, a certificate renewal (src/broker/renewal.ts) */
  certificateRenew: { suffix: 'certificate/renew', from: 'device' },
  /** gateway -> device: the renewal's answer (unless an MQTT 5 request names its own response topic) */
  certificateRenewed: { suffix: 'certificate/renewed', from: 'gateway' },
  /** gateway -> device: an OTA update action (JSON, MQTT 5 correlation data = action id), published again when the device subscribes */
  otaUpdate: { suffix: 'ota/update', from: 'gateway' },
  /** device -> gateway: progress and outcome of an OTA action (JSON object; other payloads refused) */
  otaStatus: { suffix: 'ota/status', from: 'device' },
} as const;

export type TopicKind = keyof typeof TOPICS;

const PREFIX = 'devices/';
const BY_SUFFIX = new Map<string, TopicKind>(Object.entries(TOPICS).map(([kind, t]) => [t.suffix, kind as TopicKind]));

export const deviceTopic = (thingId: string, kind: TopicKind) => `${PREFIX}${thingId}/${TOPICS[kind].suffix}`;

/** The ACL rule: a client may use only topics under `devices/{clientId}/`. */
export const topicAllowed = (clientId: string, topic: string) => isOwnTopic(clientId, topic) && !topic.includes('\0');

/** `topic` starts with `devices/{clientId}/` (checked without building the prefix: this runs for every message) */
function isOwnTopic(clientId: string, topic: string): boolean {
  const slash = PREFIX.length + clientId.length;
  return topic.length > slash + 1 && topic.charCodeAt(slash) === 47 /* '/' */ && topic.startsWith(PREFIX) && topic.startsWith(clientId, PREFIX.length);
}

const KINDS = Object.entries(TOPICS).map(([kind, t]) => ({ kind: kind as TopicKind, suffix: t.suffix }));

/** the last answer of ownTopicKind: a device message asks it three times (ACL, payload check, ingest) */
let lastClientId = '';
let lastTopic = '';
let lastKind: TopicKind | 'other' | undefined;

/** Which device topic of `clientId` this is: its kind, 'other' for another topic under its prefix, undefined outside it. */
export function ownTopicKind(clientId: string, topic: string): TopicKind | 'other' | undefined {
  if (topic === lastTopic && clientId === lastClientId) return lastKind;
  lastKind = topicKind(clientId, topic);
  lastClientId = clientId;
  lastTopic = topic;
  return lastKind;
}

function topicKind(clientId: string, topic: string): TopicKind | 'other' | undefined {
  if (!isOwnTopic(clientId, topic)) return undefined;
  const suffixLength = topic.length - PREFIX.length - clientId.length - 1;
  for (const k of KINDS) if (k.suffix.length === suffixLength && topic.endsWith(k.suffix)) return k.kind;
  return 'other';
}

/**
 * The device topics the broker's own service consumes whole (`take` in service.ts). Only these may
 * take the fast lane (fastLane.ts), which skips Aedes' `publish` event: other topics have
 * in-process listeners on that event (certificate renewal, OTA status through deviceMessaging) or
 * may get some, so they always go through Aedes.
 */
const FAST_LANE_KINDS: ReadonlySet<TopicKind | 'other'> = new Set<TopicKind>(['heartbeat', 'telemetry', 'twinReported']);

/** The kind of a device publish that may take the fast lane (its own telemetry, heartbeat or reported state), else undefined. */
export function fastLaneKind(clientId: string, topic: string): TopicKind | undefined {
  const kind = ownTopicKind(clientId, topic);
  return kind !== undefined && kind !== 'other' && FAST_LANE_KINDS.has(kind) ? kind : undefined;
}

/** Devices publish under their prefix, except on the topics the gateway publishes. */
export function devicePublishAllowed(clientId: string, topic: string): boolean {
  const kind = ownTopicKind(clientId, topic);
  if (kind === undefined || topic.includes('\0')) return false;
  return kind === 'other' || TOPICS[kind].from === 'device';
}

/** `devices/{thingId}/{suffix}` -> its parts, or undefined for other topics. */
export function parseDeviceTopic(topic: string): { thingId: string; kind: TopicKind } | undefined {
  if (!topic.startsWith(PREFIX)) return undefined;
  const slash = topic.indexOf('/', PREFIX.length);
  if (slash < 0) return undefined;
  const kind = BY_SUFFIX.get(topic.slice(slash + 1));
  return kind ? { thingId: topic.slice(PREFIX.length, slash), kind } : undefined;
}
