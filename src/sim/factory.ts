import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { HEADER_KEY_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, sign, signedFetch, type Credentials } from '../clients/svcSigner.js';
import { gatewayClient, type Schemas } from '../clients/api.js';

export interface FactoryLineOptions {
  baseUrl: string;
  /** tenant admin bearer token; without it a development token of `accountId` is fetched */
  token?: string;
  accountId?: string;
  devices: number;
  concurrency: number;
  /** share of legs (0..1) the simulated backend reports FAILED (not retryable) */
  failRate: number;
  serialPrefix: string;
  /** how long to wait for every run to end */
  timeoutSeconds: number;
  /** progress of each phase (the CLI draws bars; tests pass none) */
  onProgress?: (phase: 'enroll' | 'runs', done: number, total: number) => void;
}

/** What the simulated backend says when it fails a leg on purpose (--fail-rate). */
export const SIMULATED_FAILURE = 'simulated station failure';

export interface FactoryLineSummary {
  devices: number;
  enrolled: number;
  provisioned: number;
  inFactory: number;
  failedRuns: number;
  /** each failed run's cause (the run's error, else its failed leg's), with how many runs it ended */
  failureCauses: Record<string, number>;
  /** failed runs whose cause is not the simulated station failure: counted as errors */
  unexpectedFailedRuns: number;
  legCalls: number;
  badSignatures: number;
  runsPerSecond: number;
  durationSeconds: number;
  errors: Record<string, number>;
  errorCount: number;
}

/**
 * A simulated factory line against a running gateway: it plays the factory backend (an HTTP
 * server on loopback answering `POST /provisioning-legs`, verifying the gateway's signatures and
 * reporting each leg signed, failing `failRate` of them), registers identify and provision factory
 * services for a new model, then, signed as the provision service, enrolls `devices` things
 * (`POST /api/v1/enrollments`), starts their PROVISION sagas and waits for every run to end.
 * The gateway must allow loopback targets (ALLOW_PRIVATE_TARGETS=true: development only).
 */
export async function runFactoryLine(o: FactoryLineOptions): Promise<FactoryLineSummary> {
  const errors: Record<string, number> = {};
  const fail = (what: string) => { errors[what] = (errors[what] ?? 0) + 1; };
  const token = o.token ?? (await devToken(o.baseUrl, o.accountId ?? crypto.randomUUID()));
  // the gateway's API through the typed client generated from its OpenAPI document (src/clients/api.ts)
  const admin = gatewayClient(o.baseUrl, { bearer: token });
  /** the answer's data, or an Error naming the call, its status and the problem's detail */
  const ok = async <T>(what: string, call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> => {
    const { data, error, response } = await call;
    if (!response.ok || data === undefined) throw new Error(`${what}: ${response.status} ${(error as { detail?: string } | undefined)?.detail ?? ''}`);
    return data;
  };

  const services = new Map<string, Credentials>();
  let legCalls = 0;
  let badSignatures = 0;
  const backend = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += d));
    req.on('end', () => {
      if (req.url === '/healthz') return void res.end('ok');
      const keyId = String(req.headers[HEADER_KEY_ID]);
      const creds = services.get(keyId);
      const valid = creds !== undefined && sign(creds.secretAccessKey, {
        method: req.method ?? 'POST', target: req.url ?? '/', host: String(req.headers.host), accessKeyId: keyId, timestamp: String(req.headers[HEADER_TIMESTAMP]), body: raw,
      }) === req.headers[HEADER_SIGNATURE];
      if (!valid) { badSignatures++; return void res.writeHead(401).end(); }
      legCalls++;
      res.writeHead(202).end();
      const leg = JSON.parse(raw) as { run_id: string; leg: string; attempt: number; result_url: string };
      const failed = Math.random() < o.failRate;
      // result_url is the link the gateway sent with the leg (followed as given, not built from a path): plain signed fetch
      void signedFetch(leg.result_url, creds!, {
        method: 'POST',
        body: { run_id: leg.run_id, leg: leg.leg, attempt: leg.attempt, outcome: failed ? 'FAILED' : 'SUCCEEDED', ...(failed ? { detail: SIMULATED_FAILURE, retryable: false } : { result: { station: 1 + Math.floor(Math.random() * 8) } }) },
      }).then((r) => { if (!r.ok) fail(`provisioning-result ${r.status}`); }, () => fail('provisioning-result unreachable'));
    });
  });
  await new Promise<void>((resolve) => backend.listen(0, '127.0.0.1', resolve));
  const endpoint = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;

  try {
    const model = await ok('POST /api/v1/models', admin.POST('/api/v1/models', { body: { vid: 'FFFA', pid: crypto.randomBytes(2).toString('hex').toUpperCase(), name: 'Simulated factory model', provisioning_method: 'none' } }));
    let provisionCreds: Credentials | undefined;
    for (const role of ['identify', 'provision'] as const) {
      const s = await ok('POST /api/v1/factory-services', admin.POST('/api/v1/factory-services', { body: { role, model_id: model.id, endpoint_url: endpoint } }));
      const creds = { accessKeyId: s.access_key_id, secretAccessKey: s.secret_access_key };
      services.set(creds.accessKeyId, creds);
      if (role === 'provision') provisionCreds = creds;
    }
    const creds = provisionCreds!;
    const signed = gatewayClient(o.baseUrl, { signed: creds });
    const started = performance.now();
    const runs: string[] = [];
    let enrolled = 0;
    let next = 0;
    const worker = async () => {
      while (next < o.devices) {
        const serial = `${o.serialPrefix}-${next++}`;
        try {
          const e = await signed.POST('/api/v1/enrollments', { body: { model: model.descriptor, serial } });
          if (!e.response.ok || !e.data) { fail(`enrollment ${e.response.status}`); continue; }
          enrolled++;
          // the route takes no body (a nullish schema), but the document declares one required: {} is sent
          const p = await signed.POST('/api/v1/things/{thingId}/provision', { params: { path: { thingId: e.data.thing_id } }, body: {} });
          if (p.response.status !== 202 || !p.data) { fail(`provision ${p.response.status}`); continue; }
          runs.push(p.data.id);
        } catch (err) {
          fail((err as Error).message);
        } finally {
          o.onProgress?.('enroll', ++attempted, o.devices);
        }
      }
    };
    let attempted = 0;
    await Promise.all(Array.from({ length: Math.min(o.concurrency, o.devices) }, worker));

    // wait until no run of the model is RUNNING
    const deadline = Date.now() + o.timeoutSeconds * 1000;
    let outcome = { succeeded: 0, failed: 0, running: runs.length };
    while (Date.now() < deadline) {
      outcome = { succeeded: 0, failed: 0, running: 0 };
      for (let cursor: string | null = null, first = true; first || cursor; first = false) {
        // polled with the bearer token: the same signed GET twice within a second is a replay
        const page: Schemas['ProvisioningRunPage'] = await ok('GET /api/v1/provisioning-runs', admin.GET('/api/v1/provisioning-runs', { params: { query: { limit: 200, after: cursor ?? undefined } } }));
        for (const r of page.items) outcome[r.state === 'SUCCEEDED' ? 'succeeded' : r.state === 'FAILED' ? 'failed' : 'running']++;
        cursor = page.next_cursor;
      }
      o.onProgress?.('runs', outcome.succeeded + outcome.failed, runs.length);
      if (outcome.running === 0) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    if (outcome.running > 0) errors[`${outcome.running} runs still RUNNING after ${o.timeoutSeconds} s`] = outcome.running;
    // why runs failed: the gateway keeps the cause on the run and its legs
    const failureCauses: Record<string, number> = {};
    let unexpectedFailedRuns = 0;
    for (let cursor: string | null = null, first = true; outcome.failed > 0 && (first || cursor); first = false) {
      const page: Schemas['ProvisioningRunPage'] = await ok('GET /api/v1/provisioning-runs', admin.GET('/api/v1/provisioning-runs', { params: { query: { state: 'FAILED', limit: 200, after: cursor ?? undefined } } }));
      for (const r of page.items) {
        const cause = causeOf(r);
        failureCauses[cause] = (failureCauses[cause] ?? 0) + 1;
        if (!cause.includes(SIMULATED_FAILURE)) {
          unexpectedFailedRuns++;
          fail(`provisioning run failed: ${cause}`);
        }
      }
      cursor = page.next_cursor;
    }
    const seconds = (performance.now() - started) / 1000;
    const errorCount = Object.values(errors).reduce((n, v) => n + v, 0);
    return {
      devices: o.devices, enrolled, provisioned: runs.length, inFactory: outcome.succeeded, failedRuns: outcome.failed, failureCauses, unexpectedFailedRuns, legCalls, badSignatures,
      runsPerSecond: Math.round(((outcome.succeeded + outcome.failed) / seconds) * 10) / 10, durationSeconds: Math.round(seconds * 10) / 10, errors, errorCount,
    };
  } finally {
    backend.closeAllConnections();
    await new Promise<void>((resolve) => backend.close(() => resolve()));
  }
}

type RunView = Schemas['ProvisioningRun'];

/** A failed run's cause: its failed leg's last error (named by leg), else the run's own error. */
function causeOf(run: RunView): string {
  const leg = run.legs.find((l) => l.state === 'FAILED');
  const legError = leg && (leg.error ?? [...leg.history].reverse().find((h) => h.error)?.error);
  if (leg && legError) return `${leg.name} leg: ${legError}`;
  return run.error ?? 'no cause recorded';
}

async function devToken(baseUrl: string, accountId: string): Promise<string> {
  const { data, response } = await gatewayClient(baseUrl).POST('/dev/token', { body: { realm: `acc-${accountId}`, sub: 'factory-simulator', roles: ['admin'] } });
  if (response.status !== 200 || !data) throw new Error(`no --token given and the development issuer refused (${response.status}); pass --token`);
  return data.access_token;
}
