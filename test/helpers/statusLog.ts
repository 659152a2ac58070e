import fs from 'node:fs';
import path from 'node:path';

/**
 * Status recording for the contract test (issue 39, item 4). With STATUS_LOG=<dir> set, each test
 * gateway, as it closes, appends the (method, route, status) triples its /metrics counted
 * (http_requests_total: every response of every route, from its onResponse hook) to
 * <dir>/<pid>.log; `npm run record:statuses` runs the suite so and merges them into
 * test/http/observedStatuses.json, which test/http/contract.test.ts compares with the document.
 */
export async function recordStatuses(httpUrl: string): Promise<void> {
  const dir = process.env.STATUS_LOG;
  if (!dir) return;
  const text = await fetch(`${httpUrl}/metrics`).then((r) => r.text(), () => '');
  const lines = new Set<string>();
  for (const m of text.matchAll(/^http_requests_total\{([^}]*)\} /gm)) {
    const labels = Object.fromEntries([...m[1].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    if (labels.route && labels.route !== 'unmatched') lines.add(`${labels.method} ${labels.route} ${labels.status}`);
  }
  fs.mkdirSync(dir, { recursive: true });
  if (lines.size) fs.appendFileSync(path.join(dir, `${process.pid}.log`), [...lines].join('\n') + '\n');
}

/** `GET /api/v1/things/:thingId/state 404` -> { method, path (OpenAPI form), status } */
export function parseObserved(line: string): { method: string; path: string; status: number } {
  const [method, route, status] = line.split(' ');
  return { method: method.toLowerCase(), path: route.replace(/:([A-Za-z0-9_]+)/g, '{$1}'), status: Number(status) };
}
