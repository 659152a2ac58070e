import type tls from 'node:tls';

/** how long a closing connection waits for the device to close its side before it is cut */
export const LINGER_MS = 2_000;

/**
 * Aedes ends every connection with `socket.destroy()`, also on a clean DISCONNECT. A TCP socket
 * closed while the peer's last bytes are unread or still on the way (a device's TLS close_notify
 * right behind its DISCONNECT, or the tail of a burst) makes the kernel answer with a reset, and
 * the device sees ECONNRESET instead of a clean close. So a destroy without an error becomes a
 * close in order: the Aedes session ends at once (`endSession`), the TLS side is closed
 * (close_notify, FIN), and whatever the device still sends is read and discarded until it closes
 * too, or LINGER_MS passes. A destroy with an error (a broken connection) stays immediate.
 */
export function closeGracefully(socket: tls.TLSSocket, endSession: () => void): void {
  const destroy = socket.destroy.bind(socket);
  let closing = false;
  socket.destroy = ((err?: Error) => {
    if (err || socket.destroyed) return destroy(err);
    // the device closed its side too (Node's own destroy after both ends), or there is nothing to close in order
    if (socket.readableEnded || (!closing && !socket.writable)) return destroy();
    if (closing) return socket;
    closing = true;
    endSession();
    socket.on('data', () => {}).resume();
    socket.end();
    const timer = setTimeout(() => destroy(), LINGER_MS).unref();
    socket.once('close', () => clearTimeout(timer));
    return socket;
  }) as typeof socket.destroy;
}
