import { parseArgs } from 'node:util';
import { loadConfig } from '../config.js';

/**
 * Prints a development access token from the running gateway's development issuer.
 *   npm run token -- --realm acc-<uuid> --sub alice --roles admin,operator [--email a@b] [--expires-in 3600] [--url http://localhost:8080]
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
const base = values.url ?? loadConfig().PUBLIC_BASE_URL;
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
