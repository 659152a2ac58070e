import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';
import { signedHeaders, signingTimestamp, type Credentials } from '../clients/svcSigner.js';
import { DomainError } from '../lib/errors.js';
import { callError, resolveTarget } from './targets.js';

/** Why a call to a factory backend failed; `permanent` when retrying cannot help. */
export class BackendCallError extends Error {
  constructor(message: string, readonly permanent: boolean) {
    super(message);
  }
}

/** Statuses worth another attempt (the backend is busy or broken, not refusing the request). */
const RETRYABLE = new Set([408, 425, 429]);

export interface BackendCall {
  endpointUrl: string;
  /** the factory service's own access key and secret: the backend verifies the gateway like any signed request */
  creds: Credentials;
  body: Record<string, unknown>;
  timeoutMs: number;
  at: Date;
}

/**
 * Outbound calls to factory backends: `POST <endpoint_url>/provisioning-legs`, JSON, signed with
 * SVC-HMAC-SHA256 under the factory service's own credentials (the backend holds the same secret,
 * so it can tell the gateway from anyone else). The target is checked like a health check's
 * (no loopback, link-local or private addresses unless allowed) and the connection goes to the
 * checked address. TLS trusts the system roots plus OUTBOUND_CA_FILE.
 */
export class FactoryBackends {
  private readonly ca: string[] | undefined;

  constructor(private readonly o: { allowPrivateTargets: boolean; caFile?: string }) {
    this.ca = o.caFile ? [...tls.rootCertificates, fs.readFileSync(o.caFile, 'utf8')] : undefined;
  }

  /** Resolves when the backend accepted the leg (2xx); throws BackendCallError otherwise. */
  async dispatchLeg(call: BackendCall): Promise<void> {
    const base = new URL(call.endpointUrl);
    const url = new URL(`${base.pathname.replace(/\/+$/, '')}/provisioning-legs`, base);
    let target: { address: string; family: number };
    try {
      target = await resolveTarget(url, this.o.allowPrivateTargets, 'endpoint_url');
    } catch (err) {
      // a refused or unresolvable target is the service's configuration: no retry fixes it soon
      throw new BackendCallError(err instanceof DomainError ? err.message : String(err), true);
    }
    const body = JSON.stringify(call.body);
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'device-gateway-provisioning',
      ...signedHeaders(call.creds, { method: 'POST', target: url.pathname + url.search, host: url.host, timestamp: signingTimestamp(call.at), body }),
    };
    const client = url.protocol === 'https:' ? https : http;
    await new Promise<void>((resolve, reject) => {
      const req = client.request(url, {
        method: 'POST', headers, timeout: call.timeoutMs, ...(this.ca && url.protocol === 'https:' ? { ca: this.ca } : {}),
        // connect to the address that was checked, whatever DNS answers now
        lookup: (_h, opts, cb) => (opts.all ? cb(null, [target]) : cb(null, target.address, target.family)),
      }, (res) => {
        res.resume();
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) return resolve();
        const permanent = status >= 400 && status < 500 && !RETRYABLE.has(status);
        reject(new BackendCallError(`POST ${url.origin}${url.pathname} answered ${status}`, permanent));
      });
      req.on('timeout', () => req.destroy(new Error(`no answer within ${call.timeoutMs} ms`)));
      req.on('error', (err: NodeJS.ErrnoException) => reject(new BackendCallError(`POST ${url.origin}${url.pathname} failed: ${callError(err, url, target)}`, false)));
      req.end(body);
    });
  }
}
