/**
 * The gateway's typed client (issue 39): openapi-fetch over the types generated from the
 * gateway's own OpenAPI document (src/clients/schema.d.ts, `npm run generate:client`). Paths,
 * parameters, bodies and answers are checked by the compiler, so a contract change breaks the
 * benches and tools that use this client before it breaks a user's.
 *
 *   const api = gatewayClient(base, { bearer: token });
 *   const { data, error } = await api.POST('/api/v1/models', { body: { pid: '0001', name: 'm', provisioning_method: 'none' } });
 */
import createClient, { type Client, type Middleware } from 'openapi-fetch';
import type { components, paths } from './schema.js';
import { signedHeaders, signingTimestamp, type Credentials } from './svcSigner.js';

export type { components, paths, webhooks } from './schema.js';
/** Every named schema of the document: `Schemas['Thing']`, `Schemas['Model']`... */
export type Schemas = components['schemas'];
export type GatewayClient = Client<paths>;

/** How the client authenticates: one of them (none for public routes). */
export interface ClientAuth {
  /** an OIDC access token (or a development token from POST /dev/token) */
  bearer?: string;
  /** a static or temporary SVC access key; sessionToken with an ASIA key */
  svc?: { accessKeyId: string; secretKey: string; sessionToken?: string };
  /** a factory service's key: each request is signed with SVC-HMAC-SHA256 */
  signed?: Credentials;
}

/** Signs each request over its method, target, host and body bytes (src/clients/svcSigner.ts). */
function signing(creds: Credentials): Middleware {
  return {
    async onRequest({ request }) {
      const url = new URL(request.url);
      const body = request.body === null ? '' : await request.clone().text();
      const headers = signedHeaders(creds, { method: request.method, target: url.pathname + url.search, host: url.host, timestamp: signingTimestamp(), body });
      for (const [name, value] of Object.entries(headers)) request.headers.set(name, value);
      return request;
    },
  };
}

export function gatewayClient(baseUrl: string, auth: ClientAuth = {}): GatewayClient {
  const headers: Record<string, string> = {};
  if (auth.bearer) headers.authorization = `Bearer ${auth.bearer}`;
  if (auth.svc) {
    headers.authorization = `SVC ${Buffer.from(`${auth.svc.accessKeyId}:${auth.svc.secretKey}`).toString('base64')}`;
    if (auth.svc.sessionToken) headers['x-session-token'] = auth.svc.sessionToken;
  }
  const client = createClient<paths>({ baseUrl, headers });
  if (auth.signed) client.use(signing(auth.signed));
  return client;
}

/** The answer's data, or an Error naming the status and the problem's detail (for tools and benches). */
export async function must<T>(call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await call;
  if (error !== undefined || data === undefined) {
    const detail = (error as { detail?: string } | undefined)?.detail;
    throw new Error(`${response.status} ${response.url}: ${detail ?? JSON.stringify(error) ?? 'no body'}`);
  }
  return data;
}
