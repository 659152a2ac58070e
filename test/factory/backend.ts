import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { HEADER_KEY_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, sign, signedFetch, type Credentials } from '../../src/clients/svcSigner.js';
import { makeServerPki, type TestServerPki } from '../helpers/testCa.js';

export interface LegCall {
  leg: 'identify' | 'provision';
  run_id: string;
  thing_id: string;
  attempt: number;
  body: Record<string, any>;
  /** the gateway's SVC-HMAC-SHA256 signature verified with the service's secret */
  signatureValid: boolean;
}

/** What the backend does with a leg call: its HTTP answer, and the report it sends afterwards (none: silent). */
export interface Behaviour {
  status: number;
  report?: { outcome: 'SUCCEEDED' | 'FAILED'; detail?: string; retryable?: boolean; result?: Record<string, unknown> };
}

/**
 * A factory backend inside the test: a real HTTPS server (certificate from a throw-away CA the
 * gateway trusts through OUTBOUND_CA_FILE). It verifies the gateway's signed leg calls with the
 * service's secret, answers as `behave` says, then reports the leg through the gateway's
 * provisioning-result route, signed with the same service's credentials.
 */
export class TestFactoryBackend {
  readonly calls: LegCall[] = [];
  readonly reports: { status: number; body: any }[] = [];
  /** access key id -> credentials of the services this backend serves */
  readonly services = new Map<string, Credentials>();
  behave: (call: LegCall) => Behaviour = () => ({ status: 202, report: { outcome: 'SUCCEEDED' } });
  private constructor(private readonly server: https.Server, readonly pki: TestServerPki) {}

  static async start(): Promise<TestFactoryBackend> {
    const pki = makeServerPki();
    const server = https.createServer({ cert: pki.certPem, key: pki.keyPem });
    const backend = new TestFactoryBackend(server, pki);
    server.on('request', (req, res) => {
      let raw = '';
      req.on('data', (d) => (raw += d));
      req.on('end', () => void backend.handle(req, res, raw));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return backend;
  }

  get url(): string {
    return `https://localhost:${(this.server.address() as AddressInfo).port}`;
  }

  get caFile(): string {
    return this.pki.caFile;
  }

  callsOf(leg: string, runId?: string): LegCall[] {
    return this.calls.filter((c) => c.leg === leg && (runId === undefined || c.run_id === runId));
  }

  private async handle(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, raw: string): Promise<void> {
    if (req.url === '/healthz') return void res.end('ok');
    if (req.method !== 'POST' || req.url !== '/provisioning-legs') return void res.writeHead(404).end();
    const body = JSON.parse(raw);
    const keyId = String(req.headers[HEADER_KEY_ID]);
    const creds = this.services.get(keyId);
    const signatureValid = creds !== undefined && sign(creds.secretAccessKey, {
      method: 'POST', target: req.url, host: String(req.headers.host), accessKeyId: keyId, timestamp: String(req.headers[HEADER_TIMESTAMP]), body: raw,
    }) === req.headers[HEADER_SIGNATURE];
    const call: LegCall = { leg: body.leg, run_id: body.run_id, thing_id: body.thing_id, attempt: body.attempt, body, signatureValid };
    this.calls.push(call);
    const b = signatureValid ? this.behave(call) : { status: 401 };
    res.writeHead(b.status).end();
    if (!b.report || !creds) return;
    // the report follows the answer, as a real backend's would
    await new Promise((r) => setTimeout(r, 20));
    try {
      const reported = await signedFetch(body.result_url, creds, { method: 'POST', body: { run_id: body.run_id, leg: body.leg, attempt: body.attempt, ...b.report } });
      this.reports.push({ status: reported.status, body: await reported.json().catch(() => undefined) });
    } catch (err) {
      // the gateway died mid-report (crash tests)
      this.reports.push({ status: 0, body: String(err) });
    }
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.pki.remove();
  }
}
