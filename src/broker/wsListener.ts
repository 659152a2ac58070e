import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type tls from 'node:tls';
import { WebSocketServer, createWebSocketStream } from 'ws';
import type { Logger } from '../log.js';
import { acceptProxied, type ProxyRefusal } from './proxyListener.js';
import type { ProxiedIdentity } from './proxyProtocol.js';

/** the path MQTT over WebSocket is served on, and its subprotocol (MQTT 5 and 3.1.1 both use `mqtt`) */
export const WS_PATH = '/mqtt';
export const WS_SUBPROTOCOL = 'mqtt';

/** A device identity taken from a TLS peer certificate or a terminator's PROXY header. */
export type WsIdentity = ProxiedIdentity | tls.PeerCertificate;

export interface WsListenerOptions {
  host: string;
  port: number;
  log: Logger;
  /** largest WebSocket message (an MQTT packet travels in one or more binary messages) */
  maxPayload: number;
  /**
   * TLS mode (the default): the listener's TLS options (requestCert and rejectUnauthorized
   * against the device CA and the CRL, as MQTT_PORT). Behind a terminator instead: `proxied`,
   * plain HTTP from TRUSTED_PROXIES, each connection beginning with a PROXY v2 header.
   */
  tls?: tls.TlsOptions;
  proxied?: { trusted: (address: string | undefined) => boolean; refused?: (reason: ProxyRefusal) => void };
}

const problem = (status: number, title: string, detail: string) => {
  const body = JSON.stringify({ type: 'about:blank', title, status, detail });
  return `HTTP/1.1 ${status} ${title}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
};

/**
 * MQTT over secure WebSocket (`MQTT_WS_PORT`): `wss://host:port/mqtt` with subprotocol `mqtt`, a
 * client certificate required at the TLS handshake as on MQTT_PORT (or, behind a terminator, the
 * identity of the connection's PROXY v2 header). Each accepted WebSocket becomes a byte stream
 * given to the broker with the device's identity; everything after that is the same broker
 * (CONNECT checks, ACL, revocation). Anything else on the port (another path, no `mqtt`
 * subprotocol, a plain HTTP request) gets a problem+json 4xx and is closed.
 */
export class WsListener {
  readonly server: http.Server | https.Server;
  /** the TCP listener in front of `server` behind a terminator (it reads the PROXY headers) */
  private readonly front?: net.Server;
  private readonly wss: WebSocketServer;
  /** identities of connections accepted through a PROXY header (behind a terminator) */
  private readonly proxiedIdentities = new WeakMap<net.Socket, ProxiedIdentity>();

  constructor(private readonly options: WsListenerOptions, onConnection: (stream: Duplex, identity: WsIdentity | undefined) => void) {
    this.wss = new WebSocketServer({ noServer: true, maxPayload: options.maxPayload, perMessageDeflate: false, clientTracking: false, handleProtocols: (protocols) => (protocols.has(WS_SUBPROTOCOL) ? WS_SUBPROTOCOL : false) });
    const plain = (_req: http.IncomingMessage, res: http.ServerResponse) => {
      const body = JSON.stringify({ type: 'about:blank', title: 'Upgrade Required', status: 426, detail: `this port serves MQTT over WebSocket only: GET ${WS_PATH} with Upgrade: websocket and Sec-WebSocket-Protocol: ${WS_SUBPROTOCOL}` });
      res.writeHead(426, { 'content-type': 'application/problem+json', upgrade: 'websocket', connection: 'close' }).end(body);
    };
    if (options.proxied) {
      this.server = http.createServer(plain);
      const proxied = options.proxied;
      this.front = net.createServer({ noDelay: true }, (socket) => acceptProxied(socket, { trusted: proxied.trusted, log: options.log, refused: proxied.refused }, (s, identity) => {
        this.proxiedIdentities.set(s, identity);
        this.server.emit('connection', s);
        // acceptProxied paused it (the bytes after the header were put back): the HTTP parser reads on
        s.resume();
      }));
      this.front.on('connection', (socket) => this.track(socket));
    } else {
      this.server = https.createServer({ ...options.tls, requestCert: true, rejectUnauthorized: true }, plain);
      this.server.on('tlsClientError', (err) => options.log.debug({ err: err.message }, 'mqtt websocket tls handshake refused'));
      this.server.on('connection', (socket: net.Socket) => this.track(socket));
    }
    this.server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on('error', () => {});
      const path = (req.url ?? '').split('?')[0];
      const offered = String(req.headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim());
      if (path !== WS_PATH) return void socket.end(problem(404, 'Not Found', `MQTT over WebSocket is served on ${WS_PATH}`));
      if (!offered.includes(WS_SUBPROTOCOL)) return void socket.end(problem(400, 'Bad Request', `the WebSocket subprotocol must be ${WS_SUBPROTOCOL} (Sec-WebSocket-Protocol)`));
      const identity = this.identityOf(req.socket);
      if (!identity) return void socket.end(problem(401, 'Unauthorized', 'a client certificate from the device CA is required'));
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        const stream = createWebSocketStream(ws);
        stream.on('error', () => {});
        onConnection(stream, identity);
      });
    });
  }

  /** every open connection (upgraded ones too, which the HTTP server no longer closes): cut at close */
  private readonly sockets = new Set<net.Socket>();
  private track(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
  }

  private identityOf(socket: net.Socket): WsIdentity | undefined {
    if (this.options.proxied) return this.proxiedIdentities.get(socket);
    const tlsSocket = socket as tls.TLSSocket;
    if (!tlsSocket.authorized) return undefined;
    const cert = tlsSocket.getPeerCertificate();
    return cert && Object.keys(cert).length ? cert : undefined;
  }

  /** TLS mode: new handshakes use these options (the CRL changed). */
  setSecureContext(options: tls.SecureContextOptions): void {
    if (!this.options.proxied) (this.server as https.Server).setSecureContext(options);
  }

  listen(): Promise<void> {
    const target = this.front ?? this.server;
    return new Promise((resolve, reject) => {
      target.once('error', reject);
      target.listen(this.options.port, this.options.host, () => {
        target.off('error', reject);
        resolve();
      });
    });
  }

  get port(): number {
    return ((this.front ?? this.server).address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    const closing = [new Promise<void>((resolve) => this.server.close(() => resolve()))];
    if (this.front) closing.push(new Promise<void>((resolve) => this.front!.close(() => resolve())));
    this.server.closeAllConnections();
    for (const socket of this.sockets) socket.destroy();
    await Promise.all(closing);
  }
}
