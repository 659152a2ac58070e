import { invalid } from './errors.js';

/**
 * The token of a deeplink: the bare token, or the URL carrying it in its fragment
 * (`.../links/<kind>#<token>`) or as `?token=`. 400 when neither holds a token of this kind.
 */
export function tokenOf(input: { deeplink?: string; token?: string }, prefix: string, kind: string): string {
  let token = input.token?.trim();
  if (input.deeplink !== undefined) {
    const url = URL.parse(input.deeplink.trim());
    if (!url) throw invalid(`deeplink is not a URL`);
    token = url.hash ? decodeURIComponent(url.hash.slice(1)) : url.searchParams.get('token') ?? undefined;
  }
  if (!token || !token.startsWith(prefix) || !/^[A-Za-z0-9_-]{43}$/.test(token.slice(prefix.length))) {
    throw invalid(`not a ${kind} deeplink token (${prefix} + 43 base64url characters)`);
  }
  return token;
}
