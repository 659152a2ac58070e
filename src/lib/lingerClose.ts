import type net from 'node:net';

/**
 * Closes a connection in order after its last answer: half-close (FIN), keep reading and dropping
 * what the peer still sends, and cut it after `lingerMs` if the peer never closes its side. A
 * `destroy()` with bytes of the peer unread makes the kernel send a TCP reset, and a reset can
 * discard the answer at the peer before it reads it (seen as an empty reply instead of a 503).
 */
export function lingerClose(socket: net.Socket | null | undefined, lingerMs: number): void {
  if (!socket || socket.destroyed) return;
  socket.on('data', () => {}).resume();
  socket.end();
  const timer = setTimeout(() => socket.destroy(), lingerMs).unref();
  socket.once('close', () => clearTimeout(timer));
}
