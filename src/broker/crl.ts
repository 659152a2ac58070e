import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { CrlSource, Gateway } from '../gateway.js';
import type { Broker } from './broker.js';
import { toPem } from '../pki/pki.js';
import type { HaproxyRuntime } from './haproxyRuntime.js';

/**
 * Keeps the broker's TLS context on the trust domain's current CRL: loaded at start, on every
 * `pki.crl-changed` broadcast (all nodes), before a cluster-wide disconnect, and at least every
 * CRL_REFRESH_SECONDS. With HAPROXY_RUNTIME_API, each load is also pushed to HAProxy (the TLS
 * terminator in front of MQTT_PROXY_PORT) before `refresh` resolves: a revocation's disconnect
 * awaits it, so the DELETE answers after HAProxy refuses the certificate (a failed push is logged
 * and retried by HaproxyRuntime; the revocation still succeeds).
 */
export class CrlWatcher {
  private timer?: NodeJS.Timeout;
  private unsubscribe?: () => void;
  private loadedNumber?: number;
  private inFlight?: Promise<void>;

  constructor(private readonly gw: Gateway, private readonly broker: Broker, private readonly source: CrlSource, private readonly haproxy?: HaproxyRuntime) {}

  async start(): Promise<void> {
    this.unsubscribe = this.gw.cluster.on('pki.crl-changed', () => this.refresh());
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.gw.config.CRL_REFRESH_SECONDS * 1000);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.unsubscribe?.();
    this.haproxy?.stop();
  }

  /** Loads the current CRL now (concurrent calls share one load that starts after them). */
  refresh(): Promise<void> {
    const run = async () => {
      try {
        const crl = await this.source.current();
        const serials = new x509.X509Crl(crl.der).entries.map((e) => e.serialNumber);
        // Node's TLS checks CRLs at every chain level once one is loaded: without the root's CRL
        // (root key offline) it cannot check them at all; authenticate still does
        const rootCrl = this.gw.pki.rootCrl;
        const pems = rootCrl ? [crl.pem, toPem(await rootCrl.der(), 'X509 CRL')] : undefined;
        this.broker.setCrl(pems, serials);
        // HAProxy checks the device CA's CRL (and the root's, when there is one) at every handshake it terminates
        if (this.haproxy) await this.haproxy.push((pems ?? [crl.pem]).map((p) => p.trim()).join('\n') + '\n', serials);
        if (crl.number !== this.loadedNumber) this.gw.log.debug({ crlNumber: crl.number, revoked: serials.length }, 'broker CRL loaded');
        this.loadedNumber = crl.number;
      } catch (err) {
        this.gw.log.error({ err }, 'broker could not load the CRL; keeping the previous one');
      }
    };
    const next = (this.inFlight ?? Promise.resolve()).then(run);
    this.inFlight = next;
    return next;
  }
}
