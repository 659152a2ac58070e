import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import cliProgress from 'cli-progress';
import { gatewayUrl, URL_USAGE } from '../cli/gatewayUrl.js';
import { runSimulation, type Progress, type Scenario, type SimSummary } from './fleet.js';
import { formatBridgeReport, startSimBridge, type SimBridge, type SimBridgeReport } from './bridge.js';

const USAGE = `npm run sim -- [options]

A simulated device fleet against a running gateway: enrolls devices through a claim group
(credentials kept in --dir for the next run), connects them over MQTT with mutual TLS and sends
telemetry; devices answer commands, desired state and OTA updates. Serials revoked in an earlier
run are skipped and new serials enroll in their place; devices the platform disconnects
(a kick) connect again with backoff. Exit status: 0 when the run had no errors, 1 otherwise,
2 for bad options.

  ${URL_USAGE}
  --token JWT          tenant bearer token (default: a development token of --account)
  --account UUID       account for the development token (default: the folder's, or a new one)
  --devices N          fleet size (default 10)
  --concurrency N      parallel enrollments and connects (default 20)
  --dir PATH           credentials folder, reused by the next run (default ./sim-devices)
  --rate R             telemetry messages per second per device (default 1)
  --duration S         seconds of traffic (default 30)
  --scenario NAME      steady | reconnect-storm | revoke (default steady)
  --revoke N           devices revoked mid-run by the revoke scenario (default 10% of the fleet, at least 1)
  --protocol 5|4       MQTT version (default 5)
  --model M            model sent at enrollment: vid:pid (FFF1:8001), model id or name (default SIM-1)
  --manufacturer M     (default Simulated Devices)
  --prefix P           serial prefix (default SIM)
  --mqtt-host H        broker host instead of the enrollment response's
  --mqtt-port P        broker port instead of the enrollment response's
  --ota-fail-rate R    share of OTA updates (devices/{id}/ota/update) the devices fail, 0 to 1 (default 0)
  --ota-step-ms MS     milliseconds between a device's OTA reports (default 200)
  --bridge URL         also forward the fleet's telemetry to NATS JetStream (nats://host:port): a
                       stream, a bridge and a rule of the fleet's account, removed at the end; the
                       summary says what reached the stream against what the devices sent
  --bridge-format F    the rule's format with --bridge: event (one CloudEvent per message, default)
                       or batch (JSON arrays of a device's events of a delivery)
  --json FILE          also write the summary as JSON to FILE ("-" for stdout only)
  --no-progress        no progress bars
  -h, --help           this text
`;

function parse(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    options: {
      url: { type: 'string' },
      token: { type: 'string' }, account: { type: 'string' },
      devices: { type: 'string', default: '10' }, concurrency: { type: 'string', default: '20' },
      dir: { type: 'string', default: './sim-devices' }, rate: { type: 'string', default: '1' },
      duration: { type: 'string', default: '30' }, scenario: { type: 'string', default: 'steady' },
      revoke: { type: 'string' }, protocol: { type: 'string', default: '5' },
      model: { type: 'string', default: 'SIM-1' }, manufacturer: { type: 'string', default: 'Simulated Devices' },
      prefix: { type: 'string', default: 'SIM' }, 'mqtt-host': { type: 'string' }, 'mqtt-port': { type: 'string' },
      json: { type: 'string' }, bridge: { type: 'string' }, 'bridge-format': { type: 'string', default: 'event' }, 'ota-fail-rate': { type: 'string', default: '0' }, 'ota-step-ms': { type: 'string', default: '200' }, 'no-progress': { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  const int = (name: string, v: string, min: number) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min} (got ${v})`);
    return n;
  };
  const num = (name: string, v: string) => {
    const n = Number(v);
    if (!(n > 0)) throw new Error(`--${name} must be a positive number (got ${v})`);
    return n;
  };
  if (!['steady', 'reconnect-storm', 'revoke'].includes(values.scenario!)) throw new Error(`--scenario must be steady, reconnect-storm or revoke (got ${values.scenario})`);
  if (!['4', '5'].includes(values.protocol!)) throw new Error('--protocol must be 5 or 4');
  const devices = int('devices', values.devices!, 1);
  const failRate = Number(values['ota-fail-rate']);
  if (!(failRate >= 0 && failRate <= 1)) throw new Error(`--ota-fail-rate must be a number from 0 to 1 (got ${values['ota-fail-rate']})`);
  if (values.bridge !== undefined && !/^nats:\/\/[^/\s]+\/?$/.test(values.bridge)) throw new Error(`--bridge must be a NATS URL, nats://host:port (got ${values.bridge})`);
  const bridgeFormat = values['bridge-format'];
  if (bridgeFormat !== 'event' && bridgeFormat !== 'batch') throw new Error(`--bridge-format must be event or batch (got ${bridgeFormat})`);
  return {
    help: values.help!,
    json: values.json,
    bridge: values.bridge,
    bridgeFormat: bridgeFormat as 'event' | 'batch',
    progress: !values['no-progress'] && process.stderr.isTTY,
    options: {
      baseUrl: gatewayUrl(values.url),
      token: values.token, accountId: values.account,
      devices, concurrency: int('concurrency', values.concurrency!, 1),
      dir: path.resolve(values.dir!), rate: num('rate', values.rate!), durationSeconds: num('duration', values.duration!),
      scenario: values.scenario as Scenario,
      revokeCount: values.revoke ? int('revoke', values.revoke, 0) : Math.max(1, Math.floor(devices / 10)),
      protocolVersion: Number(values.protocol) as 4 | 5,
      manufacturer: values.manufacturer!, model: values.model!, serialPrefix: values.prefix!,
      otaFailRate: failRate, otaStepMs: int('ota-step-ms', values['ota-step-ms']!, 0),
      mqttHost: values['mqtt-host'], mqttPort: values['mqtt-port'] ? int('mqtt-port', values['mqtt-port'], 1) : undefined,
    },
  };
}

function bars(): Progress {
  const multi = new cliProgress.MultiBar({ format: ' {phase} [{bar}] {value}/{total} {extra}', hideCursor: true, clearOnComplete: false, stream: process.stderr }, cliProgress.Presets.shades_classic);
  const all = new Map<string, cliProgress.SingleBar>();
  return {
    start(phase, total) {
      const existing = all.get(phase);
      if (existing) existing.start(total, 0, { phase: phase.padEnd(7), extra: '' });
      else all.set(phase, multi.create(total, 0, { phase: phase.padEnd(7), extra: '' }));
    },
    increment(phase, n = 1) { all.get(phase)?.increment(n); },
    update(phase, value, payload) { all.get(phase)?.update(value, { extra: payload ? `${payload.msgs} msgs` : '' }); },
    stop() { multi.stop(); },
  };
}

function render(s: SimSummary): string {
  const rows: [string, unknown][] = [
    ['scenario', s.scenario], ['devices', s.devices], ['enrolled now / reused', `${s.enrolled} / ${s.reused}`],
    ['enrollments/s', s.enrollmentsPerSecond ?? '-'], ['connected', s.connected],
    ['connect latency p50 / p99 (ms)', `${s.connectLatencyMs.p50 ?? '-'} / ${s.connectLatencyMs.p99 ?? '-'}`],
    ['reconnect latency p50 / p99 (ms)', `${s.reconnectLatencyMs.p50 ?? '-'} / ${s.reconnectLatencyMs.p99 ?? '-'}`],
    ['messages sent', s.messagesSent], ['messages/s', s.messagesPerSecond],
    ['commands answered', s.commandsAnswered], ['desired states received', s.desiredReceived],
    ['OTA updates applied / failed', `${s.otaUpdated} / ${s.otaFailed}`],
    ['revoked / reconnect refused', `${s.revoked} / ${s.revokedReconnectsRefused}`],
    ['kicked / reconnected / still down', `${s.kicked} / ${s.reconnectedAfterKick} / ${s.kickedNotReconnected}`],
    ['revoked serials skipped', s.revokedSkipped.length ? s.revokedSkipped.join(', ') : '-'],
    ['new serials in their place', s.replacements.length ? s.replacements.join(', ') : '-'],
    ['errors', s.errorCount],
  ];
  const lines = rows.map(([k, v]) => `  ${k.padEnd(34)} ${v}`);
  for (const [k, v] of Object.entries(s.errors)) lines.push(`    ${v} x ${k}`);
  return `\nfleet simulator summary (${s.durationSeconds} s)\n${lines.join('\n')}\n`;
}

async function main() {
  let parsed;
  try {
    parsed = parse(process.argv.slice(2));
  } catch (err) {
    console.error(`sim: ${(err as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
  if (parsed.help) {
    console.log(USAGE);
    return;
  }
  const natsUrl = parsed.bridge;
  let bridge: SimBridge | undefined;
  const beforeTraffic = natsUrl ? async (t: { baseUrl: string; token: string }) => { bridge = await startSimBridge({ gatewayUrl: t.baseUrl, token: t.token, natsUrl, format: parsed.bridgeFormat }); } : undefined;
  const fleet = await runSimulation({ ...parsed.options, beforeTraffic }, parsed.progress ? bars() : undefined);
  let summary: SimSummary & { bridge?: SimBridgeReport } = fleet;
  if (bridge) {
    try {
      summary = { ...fleet, bridge: await bridge.report(fleet.telemetrySent) };
    } finally {
      await bridge.close();
    }
  }
  if (parsed.json !== '-') console.log(render(summary) + (summary.bridge ? `${formatBridgeReport(summary.bridge)}\n` : ''));
  if (parsed.json === '-') console.log(JSON.stringify(summary, null, 2));
  else if (parsed.json) fs.writeFileSync(parsed.json, JSON.stringify(summary, null, 2) + '\n');
  else console.log(JSON.stringify(summary));
  process.exit(summary.errorCount > 0 ? 1 : 0);
}

main().catch((err) => {
  console.error(`sim: ${(err as Error).message}`);
  process.exit(1);
});
