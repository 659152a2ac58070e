import type { MqttEndpoint } from '../gateway.js';
import type { Broker } from './broker.js';
import type { CommandRouter } from './commands.js';
import type { CrlWatcher } from './crl.js';

/**
 * The broker's runtime: the MQTT listener starts after the HTTP server (DESIGN.md section 1), so
 * the services created at init reach it through this host, which says plainly when it is not
 * running instead of leaving optional fields on each service.
 */
export class BrokerHost implements MqttEndpoint {
  private running?: { broker: Broker; crl: CrlWatcher; commands: CommandRouter };

  attach(running: { broker: Broker; crl: CrlWatcher; commands: CommandRouter }): void {
    this.running = running;
  }

  detach(): void {
    this.running = undefined;
  }

  get port(): number | undefined {
    return this.running?.broker.port;
  }

  /** The running broker, or undefined while it is not started (or stopped). */
  get broker(): Broker | undefined {
    return this.running?.broker;
  }

  get crl(): CrlWatcher | undefined {
    return this.running?.crl;
  }

  get commands(): CommandRouter | undefined {
    return this.running?.commands;
  }
}
