import type { DomainModule, Gateway } from '../gateway.js';
import { Broker } from './broker.js';

declare module '../gateway.js' {
  interface Services {
    broker: Broker;
  }
}

/** The embedded MQTT broker (TLS with required client certificates) on MQTT_PORT. */
export const brokerDomain: DomainModule = {
  name: 'broker',
  async start(gw: Gateway) {
    gw.services.broker = await Broker.start({ host: gw.config.MQTT_HOST, port: gw.config.MQTT_PORT, pki: gw.pki, log: gw.log.child({ component: 'broker' }) });
  },
  async stop(gw: Gateway) {
    await gw.services.broker?.close();
  },
  ready: (gw: Gateway) => Boolean(gw.services.broker?.server.listening),
};
