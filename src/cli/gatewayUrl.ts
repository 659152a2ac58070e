/**
 * The gateway's HTTP base URL for the command-line tools: `--url` when given, else the listener
 * the gateway itself would open from the same environment (`HTTP_HOST`, `HTTP_PORT`; default
 * 127.0.0.1:8080). Every CLI resolves it the same way, so `HTTP_PORT=9090 npm start` and
 * `HTTP_PORT=9090 npm run sim` (or `npm run sim -- --url http://127.0.0.1:9090`) meet.
 */
export function gatewayUrl(url: string | undefined, env: Record<string, string | undefined> = process.env): string {
  if (url) return url.replace(/\/$/, '');
  const rawHost = env.HTTP_HOST?.trim();
  // a wildcard listener answers on loopback; the development issuer answers loopback callers only
  const host = !rawHost || ['0.0.0.0', '::', 'localhost'].includes(rawHost) ? '127.0.0.1' : rawHost;
  const port = env.HTTP_PORT?.trim() || '8080';
  if (!/^\d{1,5}$/.test(port)) throw new Error(`HTTP_PORT must be a port number (got ${port})`);
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** The `--url` line every CLI's usage shows. */
export const URL_USAGE = '--url URL            gateway HTTP base URL (default http://127.0.0.1:$HTTP_PORT, HTTP_PORT defaulting to 8080)';

/** A fetch failure that names where it looked and how to point elsewhere. */
export function unreachable(base: string, err: unknown): Error {
  const c = (err as { cause?: { code?: string; errors?: { code?: string }[] } }).cause;
  const cause = c?.code ?? c?.errors?.[0]?.code ?? (c as Error | undefined)?.message ?? (err as Error).message;
  return new Error(`cannot reach the gateway at ${base} (${cause}); is it running (npm start)? Point at it with --url or HTTP_PORT`);
}
