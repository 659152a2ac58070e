import type { FastifyInstance } from 'fastify';
import { forbidden } from './problem.js';

/**
 * Cross-site WebSocket hijacking guard. A browser sends ambient credentials (the notification
 * stream cookie) with a WebSocket upgrade from any page, and SameSite does not cover another
 * origin of the same site (another port on localhost), so every upgrade that carries an `Origin`
 * must come from an allowed origin: the console's own (PUBLIC_BASE_URL, CONSOLE_BASE_URL) or one
 * listed in WS_ALLOWED_ORIGINS. The request's own Host is deliberately not trusted: under DNS
 * rebinding the attacker's page has the same Host as its Origin. An upgrade without `Origin` is
 * not from a browser page (a device or a server with a bearer subprotocol) and is judged by its
 * credentials alone.
 */
export function allowedWebSocketOrigins(publicBaseUrl: string, consoleBaseUrl: string, extra: readonly string[]): Set<string> {
  return new Set([publicBaseUrl, consoleBaseUrl, ...extra].map((u) => new URL(u).origin));
}

/** `https://Console.Example:443` -> `https://console.example`; undefined when not an http(s) origin (`null`, garbage). */
export function originOf(value: string): string | undefined {
  try {
    const u = new URL(value);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.origin !== 'null' ? u.origin : undefined;
  } catch {
    return undefined;
  }
}

/** Refuses (403 problem, before the upgrade and before authentication) a WebSocket upgrade from a foreign origin. */
export function installWebSocketOriginCheck(app: FastifyInstance, allowed: Set<string>): void {
  app.addHook('onRequest', async (request) => {
    if (request.headers.upgrade?.toLowerCase() !== 'websocket') return;
    const origin = request.headers.origin;
    if (origin === undefined) return;
    const normalized = originOf(origin);
    if (normalized && allowed.has(normalized)) return;
    throw forbidden(`WebSocket connections from origin ${JSON.stringify(origin.slice(0, 200))} are not allowed; allowed: the console's own origin and WS_ALLOWED_ORIGINS`, { type: 'origin-not-allowed' });
  });
}
