import tls from 'node:tls';
import type { AddressInfo } from 'node:net';
import { Aedes, type AedesOptions, type Client } from 'aedes';
import type { Logger } from '../log.js';
import type { Pki } from '../pki/pki.js';

export interface BrokerOptions {
  host: string;
  port: number;
  pki: Pki;
  log: Logger;
  /** PEM CRL (label X509 CRL) loaded at start; swapped later with `setCrl` */
  crlPem?: string;
  aedes?: Partial<AedesOptions>;
}

/** The CN of the client certificate presented on this MQTT connection. */
export function certificateCn(client: Client): string | undefined {
  const conn = client.conn as unknown as tls.TLSSocket;
  const cn = typeof conn.getPeerCertificate === 'function' ? conn.getPeerCertificate()?.subject?.CN : undefined;
  return Array.isArray(cn) ? cn[0] : cn;
}

export const topicAllowed = (clientId: string, topic: string) => topic.startsWith(`devices/${clientId}/`);

/**
 * Aedes embedded behind a TLS listener that requires client certificates from the device CA.
 * The CN must equal the MQTT client id and the username; a client may use only `devices/{clientId}/`.
 */
export class Broker {
  readonly aedes: Aedes;
  readonly server: tls.Server;
  private readonly clients = new Map<string, Client>();

  private constructor(private readonly options: BrokerOptions, aedes: Aedes) {
    this.aedes = aedes;
    this.server = tls.createServer(this.tlsOptions(options.crlPem), (socket) => aedes.handle(socket));
    this.server.on('tlsClientError', (err) => options.log.debug({ err: err.message }, 'mqtt tls handshake refused'));
    aedes.on('client', (c) => this.clients.set(c.id, c));
    aedes.on('clientDisconnect', (c) => {
      if (this.clients.get(c.id) === c) this.clients.delete(c.id);
    });
  }

  static async start(options: BrokerOptions): Promise<Broker> {
    const aedes = await Aedes.createBroker({
      authenticate: (client, username, _password, done) => {
        const cn = certificateCn(client);
        if (!cn || cn !== client.id || username !== cn) {
          const err = Object.assign(new Error('certificate CN must equal client id and username'), { returnCode: 5 as const });
          return done(err, false);
        }
        done(null, true);
      },
      authorizePublish: (client, packet, cb) => {
        if (client && !topicAllowed(client.id, packet.topic)) return cb(new Error(`publish to ${packet.topic} not allowed`));
        cb(null);
      },
      authorizeSubscribe: (client, sub, cb) => {
        if (!topicAllowed(client.id, sub.topic)) return cb(null, null);
        cb(null, sub);
      },
      ...options.aedes,
    });
    const broker = new Broker(options, aedes);
    await new Promise<void>((resolve, reject) => {
      broker.server.once('error', reject);
      broker.server.listen(options.port, options.host, () => resolve());
    });
    return broker;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  private tlsOptions(crlPem?: string): tls.SecureContextOptions & tls.TlsOptions {
    const { pki } = this.options;
    return {
      key: pki.serverKeyPem,
      cert: pki.serverCertPem + pki.rootPem,
      ca: [pki.deviceCaPem, pki.rootPem],
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: 'TLSv1.2',
      ...(crlPem ? { crl: crlPem } : {}),
    };
  }

  /** New connections are checked against this CRL (no restart). */
  setCrl(crlPem: string): void {
    this.server.setSecureContext(this.tlsOptions(crlPem));
  }

  isConnected(clientId: string): boolean {
    return this.clients.has(clientId);
  }

  /** Disconnects a client on this node; false when it is not connected here. */
  disconnect(clientId: string): boolean {
    const client = this.clients.get(clientId);
    if (!client) return false;
    client.close();
    this.clients.delete(clientId);
    return true;
  }

  async close(): Promise<void> {
    for (const c of this.clients.values()) c.close();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await new Promise<void>((resolve) => this.aedes.close(() => resolve()));
  }
}
