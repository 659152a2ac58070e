import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { gatewayClient } from '../clients/api.js';

/**
 * The simulator's data bridge: `npm run sim -- --bridge nats://host:port` creates, for the fleet's
 * account, a NATS JetStream stream capturing `<prefix>.>`, a bridge to it and a rule forwarding all
 * the fleet's telemetry (src/sim/cli.ts, through runSimulation's `beforeTraffic`, so the rule
 * exists before the first message), and reports at the end what reached the sink (messages in the
 * stream per device, against the telemetry the devices sent) and the rule's own counts and lag.
 */
export interface SimBridgeOptions {
  gatewayUrl: string;
  /** a tenant token of the fleet's account (operator or admin) */
  token: string;
  /** the NATS server the bridge publishes to, nats://host:port (credentials in it are sealed by the gateway) */
  natsUrl: string;
  /** subject prefix and stream name (default sim<random>) */
  prefix?: string;
  /** the rule's format: one CloudEvent per message (`event`, the default) or batches of a device's events (`batch`) */
  format?: 'event' | 'batch';
  /** delete the rule, bridge and stream at close (default true) */
  cleanup?: boolean;
}

export interface SimBridgeReport {
  ruleId: string;
  stream: string;
  /** messages the devices sent (as the simulator counted them), when given */
  sent?: number;
  format: 'event' | 'batch';
  /** events in the stream (with batches: the events of its arrays) */
  received: number;
  /** messages in the stream (as many as events, or fewer with batches) */
  messages: number;
  /** distinct devices seen in the stream */
  devices: number;
  rule: { status: string; delivered: number; failed: number; lag: { messages: number; seconds: number }; last_error: string | null };
}

export interface SimBridge {
  ruleId: string;
  /** waits a second (the ingest's batch), then (up to `waitMs`) until the rule's lag is 0, then counts what reached the sink */
  report(sent?: number, waitMs?: number): Promise<SimBridgeReport>;
  close(): Promise<void>;
}

/**
 * The answer of a call through the typed client (src/clients/api.ts, generated from the gateway's
 * OpenAPI document), or an Error naming the call, its status and the problem. A 204 answers undefined.
 */
async function ok<T>(what: string, call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw new Error(`${what}: ${response.status} ${typeof error === 'string' ? error : JSON.stringify(error)}`);
  return data as T;
}

export async function startSimBridge(o: SimBridgeOptions): Promise<SimBridge> {
  const prefix = o.prefix ?? `sim${Math.random().toString(36).slice(2, 10)}`;
  const format = o.format ?? 'event';
  const stream = prefix.toUpperCase().replace(/[^A-Z0-9_-]/g, '_');
  const u = new URL(o.natsUrl);
  const nc: NatsConnection = await connect({
    servers: `${u.hostname}:${u.port || 4222}`,
    ...(u.username ? (u.password ? { user: decodeURIComponent(u.username), pass: decodeURIComponent(u.password) } : { token: decodeURIComponent(u.username) }) : {}),
  });
  const jsm: JetStreamManager = await jetstreamManager(nc);
  await jsm.streams.add({ name: stream, subjects: [`${prefix}.>`] });
  const api = gatewayClient(o.gatewayUrl, { bearer: o.token });
  const bridge = await ok('POST /api/v1/bridges', api.POST('/api/v1/bridges', { body: { name: `simulator ${prefix}`, type: 'nats', url: o.natsUrl, subject_prefix: prefix } }));
  const rule = await ok('POST /api/v1/rules', api.POST('/api/v1/rules', { body: { name: `simulator ${prefix}`, from: 'devices/+/telemetry', bridge_id: bridge.id, format } }));
  const ruleView = () => ok(`GET /api/v1/rules/${rule.id}`, api.GET('/api/v1/rules/{id}', { params: { path: { id: rule.id } } }));

  /** The events of the stream's batches: every message read once by an ordered consumer. */
  const eventsIn = async (name: string, messages: number): Promise<number> => {
    const consumer = await jetstream(nc).consumers.get(name);
    let read = 0;
    let events = 0;
    while (read < messages) {
      const batch = await consumer.fetch({ max_messages: Math.min(messages - read, 1_000), expires: 5_000 });
      let got = 0;
      for await (const m of batch) {
        got++;
        const body = m.json<unknown>();
        events += Array.isArray(body) ? body.length : 1;
      }
      if (got === 0) break;
      read += got;
    }
    return events;
  };

  return {
    ruleId: rule.id,
    async report(sent, waitMs = 30_000) {
      const deadline = Date.now() + waitMs;
      // what the devices sent last reaches the history with the ingest's next batch (250 ms)
      await new Promise((r) => setTimeout(r, 1_000));
      let view = await ruleView();
      while (view.lag.messages > 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 500));
        view = await ruleView();
      }
      const info = await jsm.streams.info(stream, { subjects_filter: `${prefix}.>` });
      const messages = info.state.messages;
      return {
        ruleId: rule.id, stream, sent, format, messages, received: format === 'batch' ? await eventsIn(stream, messages) : messages, devices: Object.keys(info.state.subjects ?? {}).length,
        rule: { status: view.status, delivered: view.delivered, failed: view.failed, lag: view.lag, last_error: view.last_error },
      };
    },
    async close() {
      if (o.cleanup !== false) {
        await ok('DELETE rule', api.DELETE('/api/v1/rules/{id}', { params: { path: { id: rule.id } } })).catch(() => {});
        await ok('DELETE bridge', api.DELETE('/api/v1/bridges/{id}', { params: { path: { id: bridge.id } } })).catch(() => {});
        await jsm.streams.delete(stream).catch(() => {});
      }
      await nc.close();
    },
  };
}

export function formatBridgeReport(r: SimBridgeReport): string {
  return [
    `bridge (rule ${r.ruleId}, format ${r.format}, stream ${r.stream}): ${r.received} events reached the sink${r.format === 'batch' ? ` in ${r.messages} messages` : ''} from ${r.devices} devices${r.sent !== undefined ? ` (the devices sent ${r.sent} telemetry messages)` : ''}`,
    `  rule ${r.rule.status}: delivered ${r.rule.delivered}, failed ${r.rule.failed}, lag ${r.rule.lag.messages} messages / ${r.rule.lag.seconds} s${r.rule.last_error ? `, last error: ${r.rule.last_error}` : ''}`,
  ].join('\n');
}
