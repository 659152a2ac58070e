import { Counter, Gauge, type Registry } from 'prom-client';
import type { Broker } from './broker.js';

/**
 * Broker figures on /metrics, read from the broker's plain counters when scraped (nothing is
 * done per message beyond one addition).
 */
export function registerBrokerMetrics(registry: Registry, broker: () => Broker | undefined): void {
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
  counter('mqtt_tls_handshakes_refused_total', 'TLS handshakes refused on the MQTT port (no, unknown, expired or revoked client certificate)', (b) => b.stats.tlsHandshakesRefused);
}
