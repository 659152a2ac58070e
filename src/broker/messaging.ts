import type { AedesPublishPacket, Client } from 'aedes';
import type { DeviceMessage, DeviceMessaging, DeviceTopic, GatewayTopic } from '../gateway.js';
import type { Logger } from '../log.js';
import { unavailable } from '../lib/errors.js';
import type { Broker } from './broker.js';
import type { BrokerHost } from './host.js';
import { deviceTopic, parseDeviceTopic, TOPICS } from './topics.js';

/**
 * The `deviceMessaging` service: other domains (OTA) exchange messages with devices on their own
 * topic kinds without touching Aedes. Listeners register at init; they are attached to the broker
 * when it starts. A listener that throws is logged and costs no other message.
 */
export class DeviceChannel implements DeviceMessaging {
  private readonly messageListeners = new Map<DeviceTopic, ((m: DeviceMessage) => void)[]>();
  private readonly subscribeListeners = new Map<GatewayTopic, ((thingId: string) => void)[]>();
  private readonly offs: (() => void | Promise<void>)[] = [];

  constructor(private readonly host: BrokerHost, private readonly log: Logger) {}

  async publish(thingId: string, topic: GatewayTopic, payload: string, properties: { correlationData?: Buffer; responseTopic?: DeviceTopic } = {}): Promise<void> {
    const broker = this.host.broker;
    if (!broker) throw unavailable('the MQTT broker is not running on this node');
    await broker.publish({
      topic: deviceTopic(thingId, topic), payload, qos: 1,
      properties: {
        contentType: 'application/json',
        ...(properties.correlationData ? { correlationData: properties.correlationData } : {}),
        ...(properties.responseTopic ? { responseTopic: deviceTopic(thingId, properties.responseTopic) } : {}),
      },
    });
  }

  onMessage(topic: DeviceTopic, listener: (message: DeviceMessage) => void): void {
    this.messageListeners.set(topic, [...(this.messageListeners.get(topic) ?? []), listener]);
  }

  onSubscribed(topic: GatewayTopic, listener: (thingId: string) => void): void {
    this.subscribeListeners.set(topic, [...(this.subscribeListeners.get(topic) ?? []), listener]);
  }

  async start(broker: Broker): Promise<void> {
    // the devices of this node only: in a cluster each node handles its own devices' messages once
    const onPublish = (packet: AedesPublishPacket, client: Client | null) => {
      if (!client || this.messageListeners.size === 0) return;
      const topic = parseDeviceTopic(packet.topic);
      const listeners = topic && topic.thingId === client.id ? this.messageListeners.get(topic.kind as DeviceTopic) : undefined;
      if (listeners) this.onPacket(topic!.thingId, packet, listeners);
    };
    const onSubscribe = (subs: { topic: string }[], client: Client | null) => {
      if (!client) return;
      for (const [topic, listeners] of this.subscribeListeners) {
        if (subs.some((s) => receives(client.id, topic, s.topic))) for (const l of listeners) this.safely(() => l(client.id));
      }
    };
    // a persistent session keeps its subscriptions: it listens again as soon as it connects
    const onClient = (client: Client) => {
      if (client.clean === false) for (const listeners of this.subscribeListeners.values()) for (const l of listeners) this.safely(() => l(client.id));
    };
    broker.aedes.on('publish', onPublish);
    broker.aedes.on('subscribe', onSubscribe);
    broker.aedes.on('client', onClient);
    this.offs.push(
      () => void broker.aedes.off('publish', onPublish), () => void broker.aedes.off('subscribe', onSubscribe), () => void broker.aedes.off('client', onClient),
    );
  }

  async stop(): Promise<void> {
    for (const off of this.offs.splice(0)) await off();
  }

  private onPacket(thingId: string, packet: AedesPublishPacket, listeners: ((m: DeviceMessage) => void)[]): void {
    const correlation = (packet as { properties?: { correlationData?: Buffer | Uint8Array } }).properties?.correlationData;
    const message: DeviceMessage = {
      thingId, payload: Buffer.from(packet.payload as Buffer),
      ...(correlation ? { correlationData: Buffer.from(correlation) } : {}),
    };
    for (const l of listeners) this.safely(() => l(message));
  }

  private safely(call: () => void): void {
    try {
      call();
    } catch (err) {
      this.log.error({ err }, 'device message listener failed');
    }
  }
}

/** Does a subscription filter of `thingId` receive its `topic`? (the filters a device would use) */
export function receives(thingId: string, topic: GatewayTopic, filter: string): boolean {
  const base = `devices/${thingId}/`;
  if (!filter.startsWith(base)) return false;
  const rest = filter.slice(base.length).split('/');
  const want = TOPICS[topic].suffix.split('/');
  for (let i = 0; i < rest.length; i++) {
    if (rest[i] === '#') return true;
    if (i >= want.length || (rest[i] !== '+' && rest[i] !== want[i])) return false;
  }
  return rest.length === want.length;
}
