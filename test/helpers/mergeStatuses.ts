/**
 * Merges the statuses test gateways recorded (STATUS_LOG=<dir>, test/helpers/statusLog.ts) into
 * test/http/observedStatuses.json (a union with what it holds: a status once seen stays
 * required; a route that is gone is skipped by the contract test).
 *
 *   npm run record:statuses                      # the whole suite (minutes)
 *   STATUS_LOG=$PWD/.status-log npx vitest run test/feed/feed.test.ts && npx tsx test/helpers/mergeStatuses.ts .status-log
 */
import fs from 'node:fs';
import path from 'node:path';

const dir = process.argv[2] ?? '.status-log';
const target = path.resolve(import.meta.dirname, '../http/observedStatuses.json');
const seen = new Set<string>(fs.existsSync(target) ? (JSON.parse(fs.readFileSync(target, 'utf8')) as string[]) : []);
const before = seen.size;
for (const f of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
  for (const line of fs.readFileSync(path.join(dir, f), 'utf8').split('\n')) if (/^[A-Z]+ \/\S* \d{3}$/.test(line)) seen.add(line);
}
const sorted = [...seen].sort();
fs.writeFileSync(target, JSON.stringify(sorted, null, 1) + '\n');
console.log(`${target}: ${sorted.length} (method, route, status) triples, ${sorted.length - before} new`);
