import http from 'node:http';
import https from 'node:https';
import { callError, resolveTarget } from '../lib/targets.js';

// the target rule moved to src/lib/targets.ts (webhook deliveries use it too)
export { callError, nonPublic, resolveTarget } from '../lib/targets.js';

/** Outbound probes of factory-service endpoints (targets checked by src/lib/targets.ts). */
export interface ProbeResult {
  status: 'HEALTHY' | 'UNHEALTHY';
  httpStatus: number | null;
  latencyMs: number | null;
  error: string | null;
}

/**
 * GET `<endpoint_url>/healthz` at the checked address with a short timeout; healthy on a 2xx.
 * TLS still verifies the certificate against the URL's host name.
 */
export async function probe(endpointUrl: string, timeoutMs: number, allowPrivate: boolean): Promise<ProbeResult> {
  const base = new URL(endpointUrl);
  const url = new URL(`${base.pathname.replace(/\/+$/, '')}/healthz`, base);
  const target = await resolveTarget(url, allowPrivate, 'endpoint_url');
  const started = performance.now();
  const client = url.protocol === 'https:' ? https : http;
  return new Promise<ProbeResult>((resolve) => {
    const req = client.get(url, {
      timeout: timeoutMs,
      headers: { 'user-agent': 'device-gateway-health-check' },
      // connect to the address that was checked, whatever DNS answers now
      lookup: (_h, opts, cb) => (opts.all ? cb(null, [target]) : cb(null, target.address, target.family)),
    }, (res) => {
      res.resume();
      const latencyMs = Math.round(performance.now() - started);
      const ok = res.statusCode !== undefined && res.statusCode >= 200 && res.statusCode < 300;
      resolve({ status: ok ? 'HEALTHY' : 'UNHEALTHY', httpStatus: res.statusCode ?? null, latencyMs, error: ok ? null : `GET /healthz answered ${res.statusCode}` });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (err: NodeJS.ErrnoException) => {
      resolve({ status: 'UNHEALTHY', httpStatus: null, latencyMs: null, error: callError(err, url, target) });
    });
  });
}
