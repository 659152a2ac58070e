/**
 * bench:ingest-path: CPU per telemetry message of the gateway's ingest path alone (payload check,
 * latest-values merge, history points, the batch flush), this checkout against COMPARE_ROOT (another
 * checkout, e.g. `git worktree add /work/wt-before main`) in alternating child processes. No broker,
 * no database: the repos only encode what postgres.js would send (the history text and the latest
 * values as UTF-8), so the figures show what bench:mqtt's end-to-end rounds are too noisy to resolve.
 *
 *   COMPARE_ROOT=/work/wt-before npx tsx bench/ingest-path.ts
 *
 * Also: DEVICES (comma list, 50,1000), PER (messages per device per batch, comma list matching
 * DEVICES, 100,5), BATCHES (40), ROUNDS (3), SMALL=1 (the 48-byte payload instead of 1 KiB).
 */
import path from 'node:path';
import { execFileSync } from 'node:child_process';

const ROOT = path.resolve(import.meta.dirname, '..');

async function side(root: string, devices: number, per: number, batches: number): Promise<number> {
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
  const repo = { writeTelemetry: async (rows: { telemetry: unknown }[]) => { for (const r of rows) sink = Buffer.from(JSON.stringify(r.telemetry)); }, writeSeen: async () => {} };
  const history = { insert: async (rows: { points: string }[]) => { for (const r of rows) sink = Buffer.from(r.points); } };
  const log = { error() {}, info() {}, warn() {}, debug() {} };
  const ingest = new IngestBuffer(repo, log, history);
  // the older signature took the text only (before the history points were kept as bytes)
  const takesBytes = String(ingest.addTelemetry).includes('bytes');
  const ids = Array.from({ length: devices }, (_, i) => `thing-${i}`);
  const batch = async () => {
    for (let i = 0; i < per; i++) for (const id of ids) {
      const payload = record.subarray(20);
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
