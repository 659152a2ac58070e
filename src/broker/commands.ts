import crypto from 'node:crypto';
import type { AedesPublishPacket } from 'aedes';
import type { Broker } from './broker.js';
import { deviceTopic, parseDeviceTopic } from './topics.js';

export interface CommandResult {
  id: string;
  response: unknown;
}

interface Pending { thingId: string; resolve: (r: CommandResult) => void }

/**
 * Tenant command -> MQTT 5 request (response topic + correlation data) -> device reply. Every node
 * listens to `devices/+/commands/response` through the broker's emitter (Redis in cluster mode),
 * so the node that holds the HTTP request gets the reply wherever the device is connected.
 */
export class CommandRouter {
  private readonly pending = new Map<string, Pending>();
  private unsubscribe?: () => Promise<void>;

  constructor(private readonly broker: Broker) {}

  async start(): Promise<void> {
    this.unsubscribe = await this.broker.subscribe('devices/+/commands/response', (packet) => this.onResponse(packet));
  }

  async stop(): Promise<void> {
    await this.unsubscribe?.();
  }

  /** Resolves with the device's reply, or `undefined` after `timeoutMs`. */
  async invoke(thingId: string, name: string, payload: unknown, timeoutMs: number): Promise<CommandResult | undefined> {
    const id = crypto.randomUUID();
    const reply = new Promise<CommandResult | undefined>((resolve) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        resolve(undefined);
      }, timeoutMs);
      this.pending.set(id, { thingId, resolve: (r) => { clearTimeout(timer); this.pending.delete(id); resolve(r); } });
    });
    await this.broker.publish({
      topic: deviceTopic(thingId, 'commands'),
      payload: JSON.stringify({ id, name, payload }),
      qos: 1,
      properties: { responseTopic: deviceTopic(thingId, 'commandResponse'), correlationData: Buffer.from(id), contentType: 'application/json' },
    });
    return reply;
  }

  private onResponse(packet: AedesPublishPacket): void {
    const topic = parseDeviceTopic(packet.topic);
    if (!topic) return;
    let body: unknown;
    const text = Buffer.from(packet.payload as Buffer).toString('utf8');
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    // MQTT 5 devices echo the correlation data; MQTT 3.1.1 devices (no properties) echo `id`.
    const correlation = (packet as { properties?: { correlationData?: Buffer | Uint8Array } }).properties?.correlationData;
    const id = correlation ? Buffer.from(correlation).toString('utf8') : (body as { id?: unknown } | null)?.id;
    const waiting = typeof id === 'string' ? this.pending.get(id) : undefined;
    if (!waiting || waiting.thingId !== topic.thingId) return;
    waiting.resolve({ id: id as string, response: body });
  }
}
