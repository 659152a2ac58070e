import { parseArgs } from 'node:util';
import { runFactoryLine } from './factory.js';

const USAGE = `npm run sim:factory -- [options]

A simulated factory line: plays the factory backend on loopback, registers identify and provision
factory services for a new model, enrolls devices signed as the provision service
(POST /api/v1/enrollments), provisions them and waits for every PROVISION saga to end.
The gateway must run with ALLOW_PRIVATE_TARGETS=true (development only).

  --url URL            gateway HTTP base URL (default http://localhost:8080)
  --token JWT          tenant admin bearer token (default: a development token of --account)
  --account UUID       account for the development token (default: a new one)
  --devices N          things to enroll and provision (default 20)
  --concurrency N      parallel enrollments (default 10)
  --fail-rate F        share of legs the backend reports FAILED, 0..1 (default 0)
  --prefix P           serial prefix (default FACTORY)
  --timeout S          seconds to wait for the runs (default 120)
`;

async function main() {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      url: { type: 'string', default: 'http://localhost:8080' }, token: { type: 'string' }, account: { type: 'string' },
      devices: { type: 'string', default: '20' }, concurrency: { type: 'string', default: '10' }, 'fail-rate': { type: 'string', default: '0' },
      prefix: { type: 'string', default: 'FACTORY' }, timeout: { type: 'string', default: '120' }, help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) return void console.log(USAGE);
  const int = (name: string, v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer (got ${v})`);
    return n;
  };
  const failRate = Number(values['fail-rate']);
  if (!(failRate >= 0 && failRate <= 1)) throw new Error(`--fail-rate must be between 0 and 1 (got ${values['fail-rate']})`);
  const summary = await runFactoryLine({
    baseUrl: values.url!.replace(/\/$/, ''), token: values.token, accountId: values.account, devices: int('devices', values.devices!),
    concurrency: int('concurrency', values.concurrency!), failRate, serialPrefix: values.prefix!, timeoutSeconds: int('timeout', values.timeout!),
  });
  console.log(JSON.stringify(summary, null, 2));
  process.exit(summary.errorCount > 0 ? 1 : 0);
}

main().catch((err) => {
  console.error(`sim:factory: ${(err as Error).message}\n\n${USAGE}`);
  process.exit(1);
});
