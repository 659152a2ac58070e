/**
 * bench:ingest-path: CPU per telemetry message of the gateway's ingest path alone (payload check,
 * latest-values merge, history points, the batch flush), this checkout against COMPARE_ROOT (another
 * checkout, e.g. `git worktree add /work/wt-before main`) in alternating child processes. No broker,
 * no database: the real repos over a stand-in for postgres.js that encodes the parameters as it
 * would send them (the history text or COPY data, the latest values), so the figures show what bench:mqtt's end-to-end rounds are too noisy to resolve.
 *
 *   COMPARE_ROOT=/work/wt-before npx tsx bench/ingest-path.ts
 *
 * Also: DEVICES (comma list, 50,1000), PER (messages per device per batch, comma list matching
 * DEVICES, 100,5), BATCHES (40), ROUNDS (3), SMALL=1 (the 48-byte payload instead of 1 KiB),
 * BALLAST_MB (long-lived objects in the heap, as a gateway's sessions: garbage collection costs more).
 */
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Writable } from 'node:stream';

const ROOT = path.resolve(import.meta.dirname, '..');

/** long-lived objects standing in for a gateway's heap (its sessions): BALLAST_MB of small objects */
const ballast: unknown[] = [];

async function side(root: string, devices: number, per: number, batches: number): Promise<number> {
  for (let mb = 0; mb < Number(process.env.BALLAST_MB ?? 0); mb++) ballast.push(Array.from({ length: 8192 }, (_, i) => ({ i, s: `k${i}` })));
  const { IngestBuffer } = await import(path.join(root, 'src/broker/ingest.ts'));
  const { parseJsonPayload } = await import(path.join(root, 'src/broker/payload.ts'));
  const values: Record<string, number> = { temperature: 21.5, humidity: 40, voltage: 3.3 };
  for (let i = 0; JSON.stringify(values).length < 1000; i++) values[`sensor_${String(i).padStart(2, '0')}`] = Math.round(1000 * Math.sin(i + 1) * 100) / 100;
  let text = JSON.stringify(values);
  text = text.slice(0, 1) + `"pad":"${'x'.repeat(1024 - text.length - 9)}",` + text.slice(1);
  if (process.env.SMALL) text = JSON.stringify({ temperature: 21.5, humidity: 40, voltage: 3.3 });
  // the payload as the fast lane hands it over: a view of a TLS record
  const record = Buffer.concat([Buffer.alloc(20), Buffer.from(text)]);
  let sink: unknown;
  // the real repos over a stand-in for postgres.js that encodes the parameters as it would send them
  const encode = (v: unknown) => { sink = Buffer.from(typeof v === 'string' ? v : JSON.stringify((v as { json?: unknown }).json ?? v)); };
  const sql = Object.assign((_strings: TemplateStringsArray, ...params: unknown[]) => { params.forEach(encode); return Promise.resolve([]); }, {
    json: (value: unknown) => ({ json: value }),
    unsafe: (_text: string, params: unknown[]) => { params.forEach(encode); return Promise.resolve([]); },
    // the history's COPY: a connection whose stream takes the chunks as postgres.js would (copied into a message)
    reserve: async () => Object.assign((strings: TemplateStringsArray) => Promise.resolve(Object.assign([], { command: strings[0].trim().toUpperCase() })), {
      unsafe: () => ({ writable: async () => new Writable({ write(chunk: Buffer, _enc, cb) { sink = Buffer.concat([Buffer.alloc(5), chunk]); cb(); } }) }),
      release() {},
    }),
  });
  const { BrokerRepo } = await import(path.join(root, 'src/broker/repo.ts'));
  const { TelemetryHistoryRepo } = await import(path.join(root, 'src/broker/telemetryHistory.ts'));
  const log = { error() {}, info() {}, warn() {}, debug() {} };
  const ingest = new IngestBuffer(new BrokerRepo(sql), log, new TelemetryHistoryRepo(sql));
  // this checkout's telemetry check (bytes, no parse), or an older one's parse
  const scanner = await import(path.join(root, 'src/broker/jsonScan.ts')).catch(() => undefined);
  const takesBytes = String(ingest.addTelemetry).includes('bytes');
  const ids = Array.from({ length: devices }, (_, i) => `thing-${i}`);
  const batch = async () => {
    for (let i = 0; i < per; i++) for (const id of ids) {
      const payload = record.subarray(20);
      if (scanner) {
        const r = scanner.scanJsonObject(payload);
        if (!r.ok) throw new Error('payload refused');
        ingest.addTelemetry(id, payload, r.keys);
        continue;
      }
      const r = parseJsonPayload(payload, true);
      if (!r.ok) throw new Error('payload refused');
      ingest.addTelemetry(id, r.value, takesBytes ? { text: r.text, bytes: payload } : r.text);
    }
    await ingest.flush();
  };
  for (let b = 0; b < 10; b++) await batch();
  const before = process.cpuUsage();
  for (let b = 0; b < batches; b++) await batch();
  const used = process.cpuUsage(before);
  void sink;
  return (used.user + used.system) / (batches * per * devices);
}

if (process.env.INGEST_PATH_SIDE) {
  const [root, devices, per, batches] = process.env.INGEST_PATH_SIDE.split('|');
  console.log(await side(root, Number(devices), Number(per), Number(batches)));
} else {
  const compare = process.env.COMPARE_ROOT;
  if (!compare) throw new Error('COMPARE_ROOT=<other checkout> is required');
  const devices = (process.env.DEVICES ?? '50,1000').split(',').map(Number);
  const per = (process.env.PER ?? '100,5').split(',').map(Number);
  const rounds = Number(process.env.ROUNDS ?? 3);
  const batches = process.env.BATCHES ?? '40';
  const run = (root: string, d: number, p: number) => Number(execFileSync(process.execPath, ['--import', 'tsx', import.meta.filename], {
    cwd: ROOT, env: { ...process.env, INGEST_PATH_SIDE: `${root}|${d}|${p}|${batches}` }, encoding: 'utf8',
  }).trim());
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`bench:ingest-path  ${process.env.SMALL ? '48 B' : '1 KiB'} payload, ${rounds} alternating rounds, load ${(await import('node:os')).loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  devices.forEach((d, i) => {
    const p = per[i] ?? per[0];
    const results = { before: [] as number[], after: [] as number[] };
    for (let r = 0; r < rounds; r++) {
      results.before.push(run(path.resolve(compare), d, p));
      results.after.push(run(ROOT, d, p));
    }
    const fmt = (xs: number[]) => `${median(xs).toFixed(2)} (${xs.map((x) => x.toFixed(2)).join(', ')})`;
    console.log(`${String(d).padStart(5)} devices x ${p} messages per batch  µs/msg before ${fmt(results.before)}  after ${fmt(results.after)}`);
  });
}
