import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import mqttPacket from 'mqtt-packet';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';

/**
 * MQTT 5 Receive Maximum (3.3.4, issue 40): the broker never has more unacknowledged QoS 1/2
 * messages in flight to a client than the Receive Maximum it announced; the rest wait in order.
 * The device is a raw MQTT 5 client over mutual TLS (mqtt-packet), so the test decides exactly
 * which PUBLISH it acknowledges and when, and sees every packet the broker sends.
 */
let gw: TestGateway;
let account: TestAccount;
let claimSecret: string;

beforeAll(async () => {
  gw = await startTestGateway({ COMMAND_MAX_PENDING: '100' });
  account = await createAccount(gw);
  claimSecret = (await createClaimGroup(gw, account)).sharedSecret;
});
afterAll(async () => gw?.close());

const v5 = { protocolVersion: 5 } as const;
const encode = (packet: Record<string, unknown>) => mqttPacket.generate(packet as unknown as mqttPacket.Packet, v5);
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A device that acknowledges only when told to; counts what the broker has in flight to it. */
class RawDevice {
  readonly packets: mqttPacket.Packet[] = [];
  /** QoS 1/2 PUBLISHes received, in arrival order */
  readonly publishes: mqttPacket.IPublishPacket[] = [];
  private readonly unacked = new Set<number>();
  /** the most QoS 1/2 messages unacknowledged at any moment */
  maxUnacked = 0;
  closed = false;

  private constructor(readonly socket: tls.TLSSocket) {
    const parser = mqttPacket.parser(v5);
    parser.on('packet', (p) => {
      this.packets.push(p);
      if (p.cmd === 'publish' && p.qos > 0) {
        this.publishes.push(p);
        this.unacked.add(p.messageId!);
        this.maxUnacked = Math.max(this.maxUnacked, this.unacked.size);
      }
    });
    socket.on('data', (b) => parser.parse(b));
    socket.on('close', () => (this.closed = true));
    socket.on('error', () => {});
  }

  static async connect(d: EnrolledDevice, receiveMaximum: number, session: { clean: boolean; expiry?: number } = { clean: true }): Promise<RawDevice> {
    const socket = tls.connect({ host: '127.0.0.1', port: gw.mqttPort!, key: d.keyPem, cert: d.certPem, ca: d.caPem, servername: 'localhost' });
    await new Promise<void>((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
    const device = new RawDevice(socket);
    socket.write(encode({
      cmd: 'connect', protocolVersion: 5, clientId: d.thingId, username: d.thingId, clean: session.clean, keepalive: 60,
      properties: { receiveMaximum, ...(session.expiry ? { sessionExpiryInterval: session.expiry } : {}) },
    }));
    const connack = (await waitFor(() => device.packets.find((p) => p.cmd === 'connack'), 5000, 'CONNACK')) as mqttPacket.IConnackPacket;
    expect(connack.reasonCode).toBe(0);
    return device;
  }

  async subscribe(topic: string): Promise<void> {
    this.socket.write(encode({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 1 }] }));
    const suback = (await waitFor(() => this.packets.find((p) => p.cmd === 'suback'), 5000, 'SUBACK')) as mqttPacket.ISubackPacket;
    expect(suback.granted).toEqual([1]);
  }

  get inFlight(): number {
    return this.unacked.size;
  }

  /** PUBACKs the `n` oldest unacknowledged messages. */
  ack(n = Infinity): void {
    for (const id of [...this.unacked].slice(0, n)) {
      this.unacked.delete(id);
      this.socket.write(encode({ cmd: 'puback', messageId: id, reasonCode: 0 }));
    }
  }

  /** Acknowledges everything as it comes until `done` holds. */
  async ackUntil(done: () => boolean, what: string): Promise<void> {
    await waitFor(() => {
      this.ack();
      return done();
    }, 15_000, what, 20);
  }

  bodies(): any[] {
    return this.publishes.map((p) => JSON.parse(p.payload.toString()));
  }

  close(): void {
    this.socket.destroy();
  }
}

const device = () => enrollDevice(gw, account, { claimSecret });
const commandsOf = (thingId: string) => `/api/v1/things/${thingId}/commands`;
const statuses = async (thingId: string, ids: string[]) => {
  const items = (await gw.http.get(`${commandsOf(thingId)}?limit=500`, { token: account.viewer })).body.items as { id: string; status: string; deliveredAt: string | null }[];
  const byId = new Map(items.map((c) => [c.id, c]));
  return ids.map((id) => byId.get(id)!);
};

describe('MQTT 5 Receive Maximum (issue 40)', () => {
  it('commands: at most 10 unacknowledged; the rest stay pending (not delivered) until sent, then go in order as acknowledgements free the window', async () => {
    const d = await device();
    const dev = await RawDevice.connect(d, 10);
    await dev.subscribe(`devices/${d.thingId}/commands`);
    const ids: string[] = [];
    for (let i = 0; i < 25; i += 1) {
      const res = await gw.http.post(commandsOf(d.thingId), { name: `c${i}`, ttlSeconds: 600 }, { token: account.operator });
      expect(res.status, res.text).toBe(202);
      // the answering node holds the connection: sent before the 202 while the window has room
      expect(res.body.status).toBe(i < 10 ? 'delivered' : 'pending');
      ids.push(res.body.id);
    }
    await waitFor(() => dev.publishes.length >= 10, 5000, 'the first ten commands');
    await pause(300);
    expect(dev.publishes).toHaveLength(10);
    expect(dev.inFlight).toBe(10);
    let s = await statuses(d.thingId, ids);
    expect(s.map((c) => c.status)).toEqual([...Array(10).fill('delivered'), ...Array(15).fill('pending')]);
    expect(s.slice(10).every((c) => c.deliveredAt === null)).toBe(true);

    // three acknowledgements: exactly three more, the next oldest
    dev.ack(3);
    await waitFor(() => dev.publishes.length >= 13, 5000, 'three more commands');
    await pause(300);
    expect(dev.publishes).toHaveLength(13);
    expect(dev.inFlight).toBe(10);
    s = await statuses(d.thingId, ids);
    expect(s.filter((c) => c.status === 'delivered')).toHaveLength(13);
    expect(s.slice(13).every((c) => c.status === 'pending')).toBe(true);

    await dev.ackUntil(() => dev.publishes.length === 25, 'all commands');
    expect(dev.bodies().map((b) => b.id)).toEqual(ids);
    expect(dev.maxUnacked).toBe(10);
    // sent late, still with the TTL left (MQTT 5 message expiry) and marked delivered when sent
    const last = dev.publishes[24];
    expect(last.properties?.messageExpiryInterval).toBeGreaterThan(0);
    expect(last.properties?.messageExpiryInterval).toBeLessThanOrEqual(600);
    s = await statuses(d.thingId, ids);
    expect(s.every((c) => c.status === 'delivered')).toBe(true);
    expect(Date.parse(s[24].deliveredAt!)).toBeGreaterThan(Date.parse(s[9].deliveredAt!));
    dev.close();
  });

  it('any QoS 1 traffic (desired-state updates through the broker): 10 in flight at most, the rest in order once acknowledged', async () => {
    const d = await device();
    const dev = await RawDevice.connect(d, 10);
    await dev.subscribe(`devices/${d.thingId}/twin/desired`);
    for (let v = 1; v <= 30; v += 1) {
      const res = await gw.http.put(`/api/v1/things/${d.thingId}/twin/desired`, { desired: { step: v } }, { token: account.operator });
      expect(res.status, res.text).toBe(200);
    }
    await waitFor(() => dev.publishes.length >= 10, 5000, 'ten updates');
    await pause(300);
    expect(dev.publishes).toHaveLength(10);
    await dev.ackUntil(() => dev.bodies().some((b) => b.desired.step === 30), 'the last update');
    expect(dev.bodies().map((b) => b.desired.step)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect(dev.maxUnacked).toBe(10);
    dev.close();
  });

  it('a persistent session resumed with Receive Maximum 3: what it stored while offline comes 3 at a time, in order', async () => {
    const d = await device();
    const session = { clean: false, expiry: 300 };
    const first = await RawDevice.connect(d, 10, session);
    await first.subscribe(`devices/${d.thingId}/twin/desired`);
    first.close();
    await waitFor(() => !gw.testHooks.broker.isConnected(d.thingId), 5000, 'disconnected');
    for (let v = 1; v <= 12; v += 1) {
      expect((await gw.http.put(`/api/v1/things/${d.thingId}/twin/desired`, { desired: { step: v } }, { token: account.operator })).status).toBe(200);
    }
    const again = await RawDevice.connect(d, 3, session);
    await waitFor(() => again.publishes.length >= 3, 5000, 'the first three stored messages');
    await pause(300);
    expect(again.publishes).toHaveLength(3);
    await again.ackUntil(() => again.bodies().filter((b) => b.desired.step === 12).length > 0, 'the stored messages');
    const steps = again.bodies().map((b) => b.desired.step);
    expect(steps.slice(0, 12)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(again.maxUnacked).toBe(3);
    again.close();
  });

  it('a client that never acknowledges while 1,000 more wait is disconnected (DISCONNECT 0x97, quota exceeded)', async () => {
    const d = await device();
    const dev = await RawDevice.connect(d, 1);
    await dev.subscribe(`devices/${d.thingId}/twin/desired`);
    for (let i = 0; i < 1002; i += 1) await gw.testHooks.broker.publish({ topic: `devices/${d.thingId}/twin/desired`, payload: JSON.stringify({ version: i, desired: {} }), qos: 1 });
    await waitFor(() => dev.closed, 5000, 'the connection closed');
    expect(dev.publishes).toHaveLength(1);
    expect(dev.packets.find((p) => p.cmd === 'disconnect')).toMatchObject({ reasonCode: 0x97 });
  });
});
