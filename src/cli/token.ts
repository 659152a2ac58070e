import { parseArgs } from 'node:util';
import { loadConfig } from '../config.js';

/**
 * Prints a development access token from the running gateway's development issuer.
 *   npm run token -- --realm acc-<uuid> --sub alice --roles admin,operator [--email a@b] [--expires-in 3600] [--url http://127.0.0.1:8080]
 * The token's issuer is the gateway's PUBLIC_BASE_URL whichever URL is called.
 */
const { values } = parseArgs({
  options: {
    realm: { type: 'string' },
    sub: { type: 'string', default: 'dev-user' },
    roles: { type: 'string', default: '' },
    email: { type: 'string' },
    'expires-in': { type: 'string' },
    url: { type: 'string' },
    json: { type: 'boolean', default: false },
  },
});
if (!values.realm) {
  console.error('usage: npm run token -- --realm <acc-<uuid>|idc-<name>|platform> --sub <user> --roles <r1,r2> [--email e] [--expires-in s] [--url base]');
  process.exit(2);
}
// The issuer answers loopback callers only (unless DEV_TOKEN_REMOTE): call the listener locally.
const config = loadConfig();
const host = ['0.0.0.0', '::', 'localhost'].includes(config.HTTP_HOST) ? '127.0.0.1' : config.HTTP_HOST;
const base = values.url ?? `http://${host.includes(':') ? `[${host}]` : host}:${config.HTTP_PORT}`;
const res = await fetch(`${base}/dev/token`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({
    realm: values.realm,
    sub: values.sub,
    roles: values.roles.split(',').map((r) => r.trim()).filter(Boolean),
    ...(values.email ? { email: values.email } : {}),
    ...(values['expires-in'] ? { expires_in: Number(values['expires-in']) } : {}),
  }),
}).catch((err: Error) => {
  console.error(`cannot reach the gateway at ${base}: ${err.message} (is it running? npm start)`);
  process.exit(1);
});
const body = (await res.json()) as { access_token?: string; detail?: string };
if (!res.ok || !body.access_token) {
  console.error(`token request failed (${res.status}): ${body.detail ?? JSON.stringify(body)}`);
  process.exit(1);
}
console.log(values.json ? JSON.stringify(body) : body.access_token);
