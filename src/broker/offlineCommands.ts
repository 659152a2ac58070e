import crypto from 'node:crypto';
import type { AedesPublishPacket, Client } from 'aedes';
import type { ActorKind } from '../actors/store.js';
import type { Gateway } from '../gateway.js';
import { conflict, notFound, unavailable } from '../lib/errors.js';
import { deviceCommandMachine, type DeviceCommandStatus } from '../../machines/deviceCommand.js';
import type { Broker } from './broker.js';
import { clientSubscriptions, sendQuota } from './aedesInternals.js';
import type { BrokerHost } from './host.js';
import { deviceTopic, parseDeviceTopic } from './topics.js';

export const deviceCommandKind: ActorKind<typeof deviceCommandMachine> = {
  type: 'deviceCommand',
  machine: deviceCommandMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'device_commands',
    columns: ['status', 'delivered_at', 'completed_at', 'response'],
    project: (s, state) => ({
      status: state, delivered_at: s.context.deliveredAt, completed_at: s.context.completedAt,
      // postgres.js serializes a jsonb parameter itself (a string reply becomes a JSON string)
      response: s.context.response ?? null,
    }),
  },
};

/** scheduled sweep that expires the commands whose TTL passed */
export const EXPIRE_COMMANDS_JOB = 'broker.expire-commands';
/** commands expired per sweep transaction */
const EXPIRE_BATCH = 500;
/** cluster topic: a thing has new pending commands (the node holding its connection sends them) */
const PENDING_TOPIC = 'broker.commands-pending';

interface Row {
  id: string; thing_id: string; name: string; payload: unknown; ttl_seconds: number; status: DeviceCommandStatus;
  created_at: Date; expires_at: Date; delivered_at: Date | null; completed_at: Date | null; response: unknown;
}

export interface StoredCommand {
  id: string; thingId: string; name: string; payload: unknown; ttlSeconds: number; status: DeviceCommandStatus;
  createdAt: string; expiresAt: string; deliveredAt: string | null; completedAt: string | null; response: unknown;
}

const iso = (d: Date | null) => (d ? d.toISOString() : null);
const view = (r: Row): StoredCommand => ({
  id: r.id, thingId: r.thing_id, name: r.name, payload: r.payload, ttlSeconds: r.ttl_seconds, status: r.status,
  createdAt: r.created_at.toISOString(), expiresAt: r.expires_at.toISOString(), deliveredAt: iso(r.delivered_at),
  completedAt: iso(r.completed_at), response: r.response ?? null,
});

/**
 * A reply fails the command when it is a JSON object saying so: `"status": "failed"`, `"ok": false`
 * or an `error` member. Any other reply (JSON or not) means the device carried it out.
 */
export function replySucceeded(body: unknown): boolean {
  if (!body || typeof body !== 'object' || Array.isArray(body)) return true;
  const b = body as Record<string, unknown>;
  return !(b.status === 'failed' || b.ok === false || 'error' in b);
}

/**
 * Commands with a time to live (`ttlSeconds`): stored as deviceCommand actors and sent by the node
 * that holds the device's connection, oldest first (MQTT 5 message expiry = the TTL left): at
 * once when the device is connected and subscribed to its command topic, else when it connects
 * again with a persistent session or subscribes. Only as many as the device's Receive Maximum
 * window has room for are sent; the rest stay `pending` (in PostgreSQL, with their TTL) until an
 * acknowledgement frees a slot, so `delivered` means sent. Every transition is taken under the
 * actor's row lock, so a command is sent once even when triggers race, and a reply cannot
 * overtake the delivery's commit.
 */
export class OfflineCommands {
  private readonly offs: (() => void | Promise<void>)[] = [];
  /** this node's delivery run per thing (one at a time; a trigger during a run asks for one more) */
  private readonly runs = new Map<string, { again: boolean; done: Promise<void> }>();
  /** things whose last run stopped at a full window: their next acknowledgement starts a run */
  private readonly windowFull = new Set<string>();

  constructor(private readonly gw: Gateway, private readonly host: BrokerHost) {}

  /** Attaches to the running broker (this node's connects, subscribes and acks; replies from any node). */
  async start(broker: Broker): Promise<void> {
    const onClient = (client: Client) => {
      // a persistent session keeps its subscriptions: its pending commands can go at once
      if (client.clean === false) this.deliverLater(client.id);
    };
    const onSubscribe = (subs: { topic: string }[], client: Client | null) => {
      if (client && subs.some((s) => coversCommands(client.id, s.topic))) this.deliverLater(client.id);
    };
    const onAck = (_packet: unknown, client: Client | null) => {
      if (client && this.windowFull.has(client.id)) this.deliverLater(client.id);
    };
    const onDisconnect = (client: Client) => void this.windowFull.delete(client.id);
    broker.aedes.on('client', onClient);
    broker.aedes.on('subscribe', onSubscribe);
    broker.aedes.on('ack', onAck);
    broker.aedes.on('clientDisconnect', onDisconnect);
    this.offs.push(
      () => void broker.aedes.off('client', onClient), () => void broker.aedes.off('subscribe', onSubscribe),
      () => void broker.aedes.off('ack', onAck), () => void broker.aedes.off('clientDisconnect', onDisconnect),
    );
    this.offs.push(this.gw.cluster.on<{ thingId: string }>(PENDING_TOPIC, ({ thingId }) => {
      if (this.host.broker?.isConnected(thingId)) return this.deliverPending(thingId);
    }));
    this.offs.push(await broker.subscribe('devices/+/commands/response', (packet) => this.onResponse(packet)));
  }

  async stop(): Promise<void> {
    for (const off of this.offs.splice(0)) await off();
  }

  /**
   * Stores a command for a thing of `accountId`; the node holding the device's connection sends it
   * when the device's window has room (before this returns when that is this node).
   */
  async submit(accountId: string, thingId: string, name: string, payload: unknown, ttlSeconds: number): Promise<StoredCommand> {
    const id = crypto.randomUUID();
    const now = this.gw.clock.now();
    const expiresAt = new Date(now.getTime() + ttlSeconds * 1000);
    await this.gw.actors.run(async (uow) => {
      // one thing's submits queue on its lock, so the cap holds under concurrency
      await uow.sql`select pg_advisory_xact_lock(hashtext(${`device-commands:${thingId}`}))`;
      const [{ n }] = await uow.sql<{ n: number }[]>`
        select count(*)::int as n from device_commands where thing_id = ${thingId} and status = 'pending'`;
      const max = this.gw.config.COMMAND_MAX_PENDING;
      if (n >= max) throw conflict(`thing ${thingId} already has ${n} pending commands (at most ${max}); wait for it to connect or for them to expire`, { type: 'too-many-pending-commands' });
      await uow.sql`
        insert into device_commands (id, account_id, thing_id, name, payload, ttl_seconds, created_at, expires_at)
        values (${id}, ${accountId}, ${thingId}, ${name}, ${uow.sql.json((payload ?? null) as never)}, ${ttlSeconds}, ${now}, ${expiresAt})`;
      await uow.create(deviceCommandKind, id, { id, accountId, thingId, name, createdAt: now.toISOString(), expiresAt: expiresAt.toISOString() });
    });
    // this node's handler runs (and sends) before the other nodes are told
    await this.gw.cluster.broadcast(PENDING_TOPIC, { thingId });
    return (await this.get(accountId, thingId, id))!;
  }

  async get(accountId: string, thingId: string, id: string): Promise<StoredCommand | undefined> {
    const [row] = await this.gw.sql<Row[]>`
      select * from device_commands where id = ${id} and thing_id = ${thingId} and account_id = ${accountId}`;
    return row && view(row);
  }

  async require(accountId: string, thingId: string, id: string): Promise<StoredCommand> {
    const found = await this.get(accountId, thingId, id);
    if (!found) throw notFound(`command ${id} of thing ${thingId} not found`);
    return found;
  }

  /** Withdraws a command the device has not received yet (409 once delivered, answered or expired). */
  async cancel(accountId: string, thingId: string, id: string): Promise<StoredCommand> {
    await this.require(accountId, thingId, id);
    await this.gw.actors.run(async (uow) => {
      const result = await uow.trySend(deviceCommandKind, id, { type: 'CANCEL', at: this.gw.clock.now().toISOString() });
      if ('refused' in result) {
        throw conflict(`command ${id} is ${result.state}: only a pending command can be cancelled`, { type: 'command-not-pending', extra: { state: result.state } });
      }
    });
    return this.require(accountId, thingId, id);
  }

  /** A thing's commands, newest first (at most `limit`), optionally of one status. */
  async list(accountId: string, thingId: string, status: DeviceCommandStatus | undefined, limit: number): Promise<StoredCommand[]> {
    const rows = await this.gw.sql<Row[]>`
      select * from device_commands
      where thing_id = ${thingId} and account_id = ${accountId} ${status ? this.gw.sql`and status = ${status}` : this.gw.sql``}
      order by created_at desc, id desc limit ${limit}`;
    return rows.map(view);
  }

  /**
   * Sends the thing's pending commands, oldest first, to its connection on this node, as far as
   * its window has room. Runs one at a time per thing; resolves after a run that began after the call.
   */
  deliverPending(thingId: string): Promise<void> {
    const running = this.runs.get(thingId);
    if (running) {
      running.again = true;
      return running.done;
    }
    const run = { again: true, done: Promise.resolve() };
    run.done = (async () => {
      try {
        while (run.again) {
          run.again = false;
          await this.sendPending(thingId);
        }
      } finally {
        this.runs.delete(thingId);
      }
    })();
    this.runs.set(thingId, run);
    return run.done;
  }

  private async sendPending(thingId: string): Promise<void> {
    const client = this.host.broker?.client(thingId);
    const qos = client && commandQos(client);
    if (!client || qos === undefined) return;
    this.windowFull.delete(thingId);
    for (;;) {
      if (client.closed) return;
      const room = sendQuota(client);
      if (room <= 0) {
        this.windowFull.add(thingId);
        return;
      }
      const rows = await this.gw.sql<{ id: string }[]>`
        select id from device_commands where thing_id = ${thingId} and status = 'pending' order by created_at, id limit ${room}`;
      if (rows.length === 0) return;
      for (const { id } of rows) {
        // other QoS 1 traffic (twin, OTA) may take room meanwhile
        if (client.closed || sendQuota(client) <= 0) break;
        await this.deliver(id, client, qos);
      }
    }
  }

  /** Expires the open commands whose TTL passed; returns how many. */
  async expireDue(): Promise<number> {
    let total = 0;
    for (;;) {
      const at = this.gw.clock.now();
      const ids = await this.gw.sql<{ id: string }[]>`
        select id from device_commands where status in ('pending', 'delivered') and expires_at <= ${at}
        order by expires_at limit ${EXPIRE_BATCH}`;
      for (const { id } of ids) {
        const r = await this.gw.actors.run((uow) => uow.trySend(deviceCommandKind, id, { type: 'EXPIRE', at: at.toISOString() }));
        if (!('refused' in r)) total += 1;
      }
      if (ids.length < EXPIRE_BATCH) return total;
    }
  }

  private deliverLater(thingId: string): void {
    void this.deliverPending(thingId).catch((err) => this.gw.log.error({ err, thingId }, 'pending commands not delivered'));
  }

  /**
   * DELIVER and send in one transaction: a send that fails leaves the command pending. A command
   * whose TTL passed is expired here instead (never sent).
   */
  private async deliver(id: string, client: Client, qos: 0 | 1): Promise<void> {
    const broker = this.host.broker;
    if (!broker) throw unavailable('the MQTT broker is not running on this node');
    await this.gw.actors.run(async (uow) => {
      const at = this.gw.clock.now();
      const result = await uow.trySend(deviceCommandKind, id, { type: 'DELIVER', at: at.toISOString() });
      if ('refused' in result) {
        if (result.state === 'pending') await uow.trySend(deviceCommandKind, id, { type: 'EXPIRE', at: at.toISOString() });
        return;
      }
      const c = result.snapshot.context;
      const [{ payload }] = await uow.sql<{ payload: unknown }[]>`select payload from device_commands where id = ${id}`;
      const leftSeconds = Math.max(1, Math.ceil((Date.parse(c.expiresAt) - at.getTime()) / 1000));
      await broker.sendTo(client, {
        topic: deviceTopic(c.thingId, 'commands'),
        payload: JSON.stringify({ id, name: c.name, payload }),
        qos,
        properties: {
          responseTopic: deviceTopic(c.thingId, 'commandResponse'), correlationData: Buffer.from(id),
          contentType: 'application/json', messageExpiryInterval: leftSeconds,
        },
        messageExpiry: Date.parse(c.expiresAt),
      });
    });
  }

  private onResponse(packet: AedesPublishPacket): void {
    const topic = parseDeviceTopic(packet.topic);
    if (!topic) return;
    const text = Buffer.from(packet.payload as Buffer).toString('utf8');
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch { /* not JSON: kept as text */ }
    // MQTT 5 devices echo the correlation data; MQTT 3.1.1 devices echo `id` in the body
    const correlation = (packet as { properties?: { correlationData?: Buffer | Uint8Array } }).properties?.correlationData;
    const id = correlation ? Buffer.from(correlation).toString('utf8') : (body as { id?: unknown } | null)?.id;
    if (typeof id !== 'string' || !UUID.test(id)) return;
    void this.complete(topic.thingId, id, body).catch((err) => this.gw.log.error({ err, thingId: topic.thingId }, 'command reply not recorded'));
  }

  /** Records a device's reply, only for its own command (a device cannot answer another's). */
  private async complete(thingId: string, id: string, body: unknown): Promise<void> {
    const [row] = await this.gw.sql<{ thing_id: string }[]>`select thing_id from device_commands where id = ${id}`;
    if (!row || row.thing_id !== thingId) return;
    const at = this.gw.clock.now().toISOString();
    await this.gw.actors.run((uow) => uow.trySend(deviceCommandKind, id, { type: 'RESPOND', at, ok: replySucceeded(body), response: body }));
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The QoS a client's subscriptions grant its command topic (at most 1), undefined when none
 * covers it (a command sent then would be lost).
 */
function commandQos(client: Client): 0 | 1 | undefined {
  const subs = clientSubscriptions(client);
  let qos: 0 | 1 | undefined;
  for (const [filter, sub] of Object.entries(subs)) {
    if (coversCommands(client.id, filter)) qos = sub.qos > 0 ? 1 : (qos ?? 0);
  }
  return qos;
}

/** Does a subscription of `thingId` receive its command topic? */
function coversCommands(thingId: string, filter: string): boolean {
  const base = `devices/${thingId}/`;
  return filter === deviceTopic(thingId, 'commands') || filter === `${base}#` || filter === `${base}commands/#` || filter === `${base}+`;
}
