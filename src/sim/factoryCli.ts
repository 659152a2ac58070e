import { parseArgs } from 'node:util';
import cliProgress from 'cli-progress';
import { gatewayUrl, URL_USAGE } from '../cli/gatewayUrl.js';
import { runFactoryLine, SIMULATED_FAILURE, type FactoryLineSummary } from './factory.js';

const USAGE = `npm run sim:factory -- [options]

A simulated factory line: plays the factory backend on loopback, registers identify and provision
factory services for a new model, enrolls devices signed as the provision service
(POST /api/v1/enrollments), provisions them and waits for every PROVISION saga to end.
The gateway must run with ALLOW_PRIVATE_TARGETS=true (development only), or it refuses to call
the loopback backend and every run fails (the summary names that cause).
Exit status: 0 when every run ended and none failed for a reason other than --fail-rate's
simulated failures, 1 otherwise, 2 for bad options.

  ${URL_USAGE}
  --token JWT          tenant admin bearer token (default: a development token of --account)
  --account UUID       account for the development token (default: a new one)
  --devices N          things to enroll and provision (default 20)
  --concurrency N      parallel enrollments (default 10)
  --fail-rate F        share of legs the backend reports FAILED, 0..1 (default 0)
  --prefix P           serial prefix (default FACTORY)
  --timeout S          seconds to wait for the runs (default 120)
  --no-progress        no progress bars
  -h, --help           this text
`;

function parse() {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      url: { type: 'string' }, token: { type: 'string' }, account: { type: 'string' },
      devices: { type: 'string', default: '20' }, concurrency: { type: 'string', default: '10' }, 'fail-rate': { type: 'string', default: '0' },
      prefix: { type: 'string', default: 'FACTORY' }, timeout: { type: 'string', default: '120' },
      'no-progress': { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  const int = (name: string, v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer (got ${v})`);
    return n;
  };
  const failRate = Number(values['fail-rate']);
  if (!(failRate >= 0 && failRate <= 1)) throw new Error(`--fail-rate must be between 0 and 1 (got ${values['fail-rate']})`);
  return {
    help: values.help!,
    progress: !values['no-progress'] && process.stderr.isTTY,
    options: {
      baseUrl: gatewayUrl(values.url), token: values.token, accountId: values.account, devices: int('devices', values.devices!),
      concurrency: int('concurrency', values.concurrency!), failRate, serialPrefix: values.prefix!, timeoutSeconds: int('timeout', values.timeout!),
    },
  };
}

function render(s: FactoryLineSummary): string {
  const lines = [
    `  devices enrolled / provisioned       ${s.enrolled} / ${s.provisioned} of ${s.devices}`,
    `  runs succeeded (IN_FACTORY) / failed ${s.inFactory} / ${s.failedRuns}`,
    `  leg calls / bad signatures           ${s.legCalls} / ${s.badSignatures}`,
    `  runs/s                               ${s.runsPerSecond}`,
  ];
  for (const [cause, n] of Object.entries(s.failureCauses)) lines.push(`    ${n} run(s) failed: ${cause}${cause.includes(SIMULATED_FAILURE) ? ' (simulated, --fail-rate)' : ''}`);
  for (const [error, n] of Object.entries(s.errors)) lines.push(`    ${n} x error: ${error}`);
  return `\nfactory line summary (${s.durationSeconds} s)\n${lines.join('\n')}\n`;
}

async function main() {
  let parsed;
  try {
    parsed = parse();
  } catch (err) {
    console.error(`sim:factory: ${(err as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
  if (parsed.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const multi = parsed.progress
    ? new cliProgress.MultiBar({ format: ' {phase} [{bar}] {value}/{total}', hideCursor: true, clearOnComplete: false, stream: process.stderr }, cliProgress.Presets.shades_classic)
    : undefined;
  const bars = new Map<string, cliProgress.SingleBar>();
  const summary = await runFactoryLine({
    ...parsed.options,
    onProgress: (phase, done, total) => {
      if (!multi) return;
      let bar = bars.get(phase);
      if (!bar) bars.set(phase, (bar = multi.create(total, 0, { phase: (phase === 'enroll' ? 'enroll' : 'runs ended').padEnd(10) })));
      bar.setTotal(total);
      bar.update(done);
    },
  }).finally(() => multi?.stop());
  console.error(render(summary));
  console.log(JSON.stringify(summary, null, 2));
  process.exit(summary.errorCount > 0 ? 1 : 0);
}

main().catch((err) => {
  console.error(`sim:factory: ${(err as Error).message}`);
  process.exit(1);
});
