import { Counter, Gauge, type Registry } from 'prom-client';
import type { Broker } from './broker.js';
import type { IngestBuffer } from './ingest.js';
import type { TelemetryLog } from './telemetryHistory.js';
import { PAYLOAD_PROBLEMS } from './payload.js';

/**
 * Broker figures on /metrics, read from the broker's plain counters when scraped (nothing is
 * done per message beyond one addition).
 */
export function registerBrokerMetrics(registry: Registry, broker: () => Broker | undefined, ingest: IngestBuffer, telemetryLog: TelemetryLog): void {
  const counter = (name: string, help: string, read: (b: Broker) => number) =>
    new Counter({
      name, help, registers: [registry],
      collect() {
        const b = broker();
        if (b) {
          this.reset();
          this.inc(read(b));
        }
      },
    });
  new Gauge({
    name: 'mqtt_connected_clients', help: 'MQTT clients connected to this node', registers: [registry],
    collect() {
      this.set(broker()?.connectedCount ?? 0);
    },
  });
  counter('mqtt_messages_received_total', 'PUBLISH packets received from devices on this node (after authorization)', (b) => b.stats.messagesReceived);
  counter('mqtt_connects_total', 'MQTT sessions accepted on this node', (b) => b.stats.connects);
  counter('mqtt_connects_refused_total', 'MQTT CONNECTs refused on this node (CN mismatch, revoked certificate)', (b) => b.stats.connectsRefused);
  counter('mqtt_proxy_connections_refused_total', 'Connections on MQTT_PROXY_PORT (and MQTT_WS_PORT behind a terminator) closed before CONNECT: peer not in TRUSTED_PROXIES, no valid PROXY v2 header, no verified client certificate in it', (b) => b.stats.proxyRefused);
  counter('mqtt_tls_handshakes_refused_total', 'TLS handshakes refused on the MQTT port (no, unknown, expired or revoked client certificate)', (b) => b.stats.tlsHandshakesRefused);
  new Counter({
    name: 'broker_payloads_rejected_total', help: 'Device publishes refused for their payload on this node (MQTT 5: PUBACK 0x99; MQTT 3.1.1: dropped), by reason',
    labelNames: ['reason'], registers: [registry],
    collect() {
      const b = broker();
      if (!b) return;
      this.reset();
      for (const reason of PAYLOAD_PROBLEMS) this.inc({ reason }, b.stats.payloadsRejected[reason]);
    },
  });
  new Counter({
    name: 'broker_ingest_batches_total', help: 'Ingest batches written on this node: one transaction each (history rows, or latest values with the history off); a QoS 1 PUBACK waits for its batch', registers: [registry],
    collect() {
      this.reset();
      this.inc(ingest.written.batches);
    },
  });
  new Counter({
    name: 'broker_ingest_batch_messages_total', help: 'Telemetry messages in the ingest batches of broker_ingest_batches_total (rate over rate: the mean batch)', registers: [registry],
    collect() {
      this.reset();
      this.inc(ingest.written.messages);
    },
  });
  new Counter({
    name: 'telemetry_log_rows_read_total', help: 'History rows that log readers on this node (data bridge rules) took, by where their points came from: memory (RecentHistory, TELEMETRY_RECENT_MB) or database',
    labelNames: ['points'], registers: [registry],
    collect() {
      this.reset();
      for (const [points, n] of Object.entries(telemetryLog.rowsRead)) this.inc({ points }, n);
    },
  });
  new Counter({
    name: 'broker_ingest_rows_dropped_total', help: 'Batched device rows the database refused (or a failed batch), dropped, by table',
    labelNames: ['table'], registers: [registry],
    collect() {
      this.reset();
      for (const [table, n] of Object.entries(ingest.dropped)) this.inc({ table }, n);
    },
  });
}
