import type { MqttEndpoint } from '../gateway.js';
import type { Broker } from './broker.js';
import type { CommandRouter } from './commands.js';
import type { CrlWatcher } from './crl.js';

/**
 * The broker's runtime: the MQTT listener starts after the HTTP server (DESIGN.md section 1), so
 * the services created at init reach it through this host, which says plainly when it is not
 * running instead of leaving optional fields on each service.
 */
export interface BrokerRuntime { broker: Broker; crl: CrlWatcher; commands: CommandRouter }

export class BrokerHost implements MqttEndpoint {
  private running?: BrokerRuntime;

  attach(running: BrokerRuntime): void {
    this.running = running;
  }

  detach(): void {
    this.running = undefined;
  }

  /** The running parts; throws while the broker is not running (between the broker domain's start and stop it is). */
  runtime(): BrokerRuntime {
    if (!this.running) throw new Error('the MQTT broker is not running on this node');
    return this.running;
  }

  /** the MQTT listener accepts connections (readiness) */
  get listening(): boolean {
    return this.running?.broker.server.listening ?? false;
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
