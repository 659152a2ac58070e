import { parseArgs } from 'node:util';
import { gatewayUrl, unreachable, URL_USAGE } from './gatewayUrl.js';

const USAGE = `npm run token -- --realm REALM [options]

Prints an access token from the running gateway's development issuer (on by default in the
embedded mode; it answers loopback callers only). The token's issuer is the gateway's
PUBLIC_BASE_URL whichever URL is called.

  --realm REALM        acc-<account id> (tenant user) | idc-<name> (identity center) | platform (required)
  --sub USER           subject (default dev-user)
  --roles R1,R2        roles, comma-separated (e.g. admin,operator; platform-admin)
  --email E            email claim
  --expires-in S       lifetime in seconds
  --json               print the whole answer as JSON, not only the token
  ${URL_USAGE}
  -h, --help           this text

Example: npm run token -- --realm acc-$(uuidgen) --sub alice --roles admin
`;

function parse() {
  try {
    return parseArgs({
      options: {
        realm: { type: 'string' },
        sub: { type: 'string', default: 'dev-user' },
        roles: { type: 'string', default: '' },
        email: { type: 'string' },
        'expires-in': { type: 'string' },
        url: { type: 'string' },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
    }).values;
  } catch (err) {
    console.error(`token: ${(err as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
}

const values = parse();
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
if (!values.realm) {
  console.error(`token: --realm is required\n\n${USAGE}`);
  process.exit(2);
}
if (values['expires-in'] !== undefined && !(Number.isInteger(Number(values['expires-in'])) && Number(values['expires-in']) > 0)) {
  console.error(`token: --expires-in must be a positive integer of seconds (got ${values['expires-in']})`);
  process.exit(2);
}
let base: string;
try {
  base = gatewayUrl(values.url);
} catch (err) {
  console.error(`token: ${(err as Error).message}`);
  process.exit(2);
}
const res = await fetch(`${base}/dev/token`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({
    realm: values.realm,
    sub: values.sub,
    roles: values.roles!.split(',').map((r) => r.trim()).filter(Boolean),
    ...(values.email ? { email: values.email } : {}),
    ...(values['expires-in'] ? { expires_in: Number(values['expires-in']) } : {}),
  }),
}).catch((err: Error) => {
  console.error(`token: ${unreachable(base, err).message}`);
  process.exit(1);
});
const body = (await res.json().catch(() => ({}))) as { access_token?: string; detail?: string };
if (!res.ok || !body.access_token) {
  console.error(`token: request failed (${res.status}): ${body.detail ?? JSON.stringify(body)}`);
  process.exit(1);
}
console.log(values.json ? JSON.stringify(body) : body.access_token);
