import type { Socket } from 'node:net';

/**
 * The documented bound of a live stream (SSE or WebSocket): a client whose unsent backlog in the
 * gateway passes this is disconnected at once. Notification streams resume with Last-Event-ID;
 * the device pages read their data again on reconnect.
 */
export const STREAM_MAX_BACKLOG_BYTES = 1024 * 1024;

/**
 * Drops a connection at once, with what is queued for it: a TCP reset discards both the bytes
 * Node holds and those in the kernel's send buffer (a plain `end()` waits behind them, and
 * `destroy()` leaves the kernel's share until the peer reads). A TLS socket cannot be reset by
 * Node (its handle is not a TCP handle) and is destroyed instead.
 */
export function dropConnection(socket: Socket): void {
  try {
    socket.resetAndDestroy();
  } catch {
    socket.destroy();
  }
}

export type Drained = 'drained' | 'closed' | 'stalled';

/** Waits for `socket` to write out its queue; 'stalled' when `timeoutMs` passes first. */
export function drained(socket: Socket, timeoutMs: number): Promise<Drained> {
  if (socket.destroyed) return Promise.resolve('closed');
  if (socket.writableLength === 0) return Promise.resolve('drained');
  return new Promise((resolve) => {
    const done = (outcome: Drained) => {
      clearTimeout(timer);
      socket.off('drain', onDrain);
      socket.off('close', onClose);
      resolve(outcome);
    };
    const onDrain = () => done('drained');
    const onClose = () => done('closed');
    const timer = setTimeout(() => done('stalled'), timeoutMs);
    socket.once('drain', onDrain);
    socket.once('close', onClose);
  });
}
