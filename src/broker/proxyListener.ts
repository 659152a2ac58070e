import net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../log.js';
import { deviceIdentity, parseProxyHeader, ProxyHeaderError, type ProxiedIdentity } from './proxyProtocol.js';

/** how long a trusted proxy has to send the whole PROXY header after connecting */
export const PROXY_HEADER_TIMEOUT_MS = 5_000;

const ignoreError = () => {};

/** Why connections on a PROXY listener were closed before CONNECT (what the listener counts). */
export type ProxyRefusal = 'untrusted' | 'header' | 'identity' | 'timeout';

export interface ProxyAcceptOptions {
  /** is this peer address one of TRUSTED_PROXIES (src/http/trustedProxies.ts, given by the broker's index.ts)? Only those may connect */
  trusted: (address: string | undefined) => boolean;
  log: Logger;
  /** a counter per refusal reason */
  refused?: (reason: ProxyRefusal) => void;
  headerTimeoutMs?: number;
}

/**
 * Reads the PROXY protocol v2 header at the start of a connection from a trusted proxy (a TLS
 * terminator) and hands the connection on with the device identity the header vouches for, its
 * bytes after the header unread (put back on the socket). Closed without a word, before anything
 * else of it is read: a peer not in TRUSTED_PROXIES (at once, without reading), a connection that
 * does not begin with a valid header within the timeout, and a header without a verified client
 * certificate (`deviceIdentity`).
 */
export function acceptProxied(socket: net.Socket, options: ProxyAcceptOptions, onAccepted: (socket: net.Socket, identity: ProxiedIdentity) => void): void {
  const refuse = (reason: ProxyRefusal, detail: string) => {
    options.refused?.(reason);
    options.log.debug({ peer: socket.remoteAddress, reason, detail }, 'mqtt proxy connection refused');
    socket.destroy();
  };
  // a module-level no-op: a closure made here would keep this function's variables (the header bytes, the timer) for the connection's life
  socket.on('error', ignoreError);
  if (!options.trusted(socket.remoteAddress)) return refuse('untrusted', `${socket.remoteAddress} is not in TRUSTED_PROXIES`);
  let received: Buffer = Buffer.alloc(0);
  let decided = false;
  // Timers run before the event loop reads its sockets: after the loop was blocked past the
  // deadline (a busy node), a header that arrived meanwhile is still unread. So the refusal waits
  // for this turn's reads (an immediate runs after them): in a reconnect storm of 10,000 sessions
  // headers HAProxy had sent at once were refused as late.
  const timer = setTimeout(() => setImmediate(() => {
    if (decided) return;
    decided = true;
    socket.off('data', onData);
    refuse('timeout', 'no complete PROXY header in time');
  }), options.headerTimeoutMs ?? PROXY_HEADER_TIMEOUT_MS);
  const clear = () => {
    decided = true;
    clearTimeout(timer);
  };
  const onData = (chunk: Buffer) => {
    received = received.length === 0 ? chunk : Buffer.concat([received, chunk]);
    let header;
    try {
      header = parseProxyHeader(received);
    } catch (err) {
      clear();
      socket.off('data', onData);
      return refuse('header', err instanceof ProxyHeaderError ? err.message : String(err));
    }
    if (!header) return;
    clear();
    socket.off('data', onData);
    socket.off('close', clear);
    socket.pause();
    const identity = deviceIdentity(header);
    if (typeof identity === 'string') return refuse('identity', identity);
    if (received.length > header.length) socket.unshift(received.subarray(header.length));
    onAccepted(socket, identity);
  };
  socket.on('data', onData);
  socket.once('close', clear);
}

export interface ProxyListenerOptions extends ProxyAcceptOptions {
  host: string;
  port: number;
}

/**
 * `MQTT_PROXY_PORT`: plain TCP from a TLS terminator (HAProxy `send-proxy-v2`), each connection
 * beginning with a PROXY v2 header that carries the verified client certificate's identity
 * (acceptProxied); the rest of the connection is the device's MQTT, handed to `onConnection`.
 */
export class ProxyListener {
  readonly server: net.Server;
  readonly refused: Record<ProxyRefusal, number> = { untrusted: 0, header: 0, identity: 0, timeout: 0 };

  constructor(private readonly options: ProxyListenerOptions, onConnection: (socket: net.Socket, identity: ProxiedIdentity) => void) {
    const accept: ProxyAcceptOptions = { ...options, refused: (reason) => {
      this.refused[reason] += 1;
      options.refused?.(reason);
    } };
    this.server = net.createServer({ noDelay: true }, (socket) => {
      // closed with the listener while its header is awaited (an accepted one is the broker's to close)
      this.pending.add(socket);
      socket.once('close', () => this.pending.delete(socket));
      acceptProxied(socket, accept, (s, identity) => {
        this.pending.delete(socket);
        onConnection(s, identity);
      });
    });
  }

  private readonly pending = new Set<net.Socket>();

  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.options.port, this.options.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const socket of this.pending) socket.destroy();
    return closed;
  }
}
