import crypto from 'node:crypto';
import type { DeviceSessions, DisconnectOptions, Gateway } from '../gateway.js';
import type { BrokerHost } from './host.js';

const REQUEST_TOPIC = 'broker.disconnect';
const REPLY_TOPIC = 'broker.disconnect-reply';
const HEARTBEAT_MS = 5_000;
/** a node silent this long is considered gone (its sockets are gone with it) */
const NODE_TTL_SECONDS = 20;
const REPLY_TIMEOUT_MS = 5_000;

interface Request { id: string; thingId: string; from: string; options?: DisconnectOptions }
interface Reply { id: string; node: string; disconnected: boolean }

/**
 * `deviceSessions` across the cluster. A disconnect is broadcast to every live broker node; each
 * reloads the CRL first (so the revoked device cannot come back on it) and then drops the
 * device's connection if it holds it, and replies. It resolves when every live node replied.
 */
export class ClusterSessions implements DeviceSessions {
  private readonly pending = new Map<string, { waiting: Set<string>; disconnected: boolean; done: () => void }>();
  private readonly offs: (() => void)[] = [];
  private heartbeat?: NodeJS.Timeout;

  constructor(private readonly gw: Gateway, private readonly host: BrokerHost) {}

  get nodeId(): string {
    return this.gw.cluster.nodeId;
  }

  async start(): Promise<void> {
    this.offs.push(this.gw.cluster.on<Request>(REQUEST_TOPIC, (req) => this.handleRequest(req)));
    this.offs.push(this.gw.cluster.on<Reply>(REPLY_TOPIC, (reply) => this.handleReply(reply)));
    await this.beat();
    this.heartbeat = setInterval(() => void this.beat().catch((err) => this.gw.log.warn({ err }, 'broker node heartbeat failed')), HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.heartbeat);
    for (const off of this.offs.splice(0)) off();
    await this.gw.sql`delete from broker_nodes where node_id = ${this.nodeId}`.catch(() => {});
  }

  private async beat(): Promise<void> {
    await this.gw.sql`
      insert into broker_nodes (node_id, heartbeat_at) values (${this.nodeId}, now())
      on conflict (node_id) do update set heartbeat_at = now()`;
  }

  async disconnect(thingId: string, options: DisconnectOptions = {}): Promise<{ disconnected: boolean }> {
    const others = (await this.gw.sql<{ node_id: string }[]>`
      select node_id from broker_nodes
      where node_id <> ${this.nodeId} and heartbeat_at > now() - make_interval(secs => ${NODE_TTL_SECONDS})`).map((r) => r.node_id);
    const id = crypto.randomUUID();
    const entry = { waiting: new Set(others), disconnected: false, done: () => {} };
    const waitRemote = others.length === 0 ? Promise.resolve() : new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.gw.log.warn({ thingId, missing: [...entry.waiting] }, 'broker nodes did not answer a disconnect in time');
        entry.done();
      }, REPLY_TIMEOUT_MS);
      entry.done = () => {
        clearTimeout(timer);
        this.pending.delete(id);
        resolve();
      };
      this.pending.set(id, entry);
    });
    // this node first (it also reloads the CRL), while the others do the same
    const local = this.local(thingId, options);
    await this.gw.cluster.notify<Request>(REQUEST_TOPIC, { id, thingId, from: this.nodeId, options });
    const here = await local;
    await waitRemote;
    return { disconnected: here || entry.disconnected };
  }

  private async local(thingId: string, options: DisconnectOptions = {}): Promise<boolean> {
    // a node whose broker is not running holds no device
    await this.host.crl?.refresh();
    return (await this.host.broker?.disconnect(thingId, options)) ?? false;
  }

  private async handleRequest(req: Request): Promise<void> {
    if (req.from === this.nodeId) return;
    const disconnected = await this.local(req.thingId, req.options);
    await this.gw.cluster.notify<Reply>(REPLY_TOPIC, { id: req.id, node: this.nodeId, disconnected });
  }

  private handleReply(reply: Reply): void {
    const entry = this.pending.get(reply.id);
    if (!entry) return;
    entry.disconnected ||= reply.disconnected;
    entry.waiting.delete(reply.node);
    if (entry.waiting.size === 0) entry.done();
  }
}
