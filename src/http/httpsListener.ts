import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { CrlSource, Gateway, ZodApp } from '../gateway.js';
import { toPem } from '../pki/pki.js';

export interface HttpsListener {
  port: number;
  close(graceMs?: number): Promise<void>;
}

/**
 * The mutual-TLS listener (HTTPS_PORT) through which devices call /ddi with their certificate, so
 * no proxy header has to be believed. Same routes as the HTTP listener (requests go to the one
 * Fastify app's router). Server certificate: the broker's, from the PKI. A client certificate is
 * optional (enrollment and the token flow need none) and checked against the device CA and the
 * CRL, but never rejected at the handshake: the auth hook answers a bad one with a problem
 * (401/403) instead of a TLS alert. The CRL is reloaded on every `pki.crl-changed` and every
 * CRL_REFRESH_SECONDS (the root's CRL is re-signed daily), as the broker's.
 */
export async function startHttpsListener(gw: Gateway, app: ZodApp, crl: CrlSource): Promise<HttpsListener> {
  const { config, pki, log } = gw;
  // Node checks CRLs for the whole chain once one is loaded, so the root's (empty) CRL is needed too;
  // without the root key the CRL stays out of TLS and revocation is the auth hook's check alone.
  const rootCrl = pki.rootCrl;
  const context = async (): Promise<https.ServerOptions> => ({
    key: pki.serverKeyPem, cert: pki.serverCertPem, ca: pki.bundlePem,
    ...(rootCrl ? { crl: [(await crl.current()).pem, toPem(await rootCrl.der(), 'X509 CRL')] } : {}),
  });
  const server = https.createServer({ ...(await context()), requestCert: true, rejectUnauthorized: false }, (req, res) => app.routing(req, res));
  const reload = async () => {
    try {
      server.setSecureContext(await context());
    } catch (err) {
      log.error({ err }, 'HTTPS listener could not load the CRL; keeping the previous one');
    }
  };
  const unsubscribe = rootCrl ? gw.cluster.on(crl.changedTopic, () => reload()) : () => {};
  const timer = rootCrl ? setInterval(() => void reload(), config.CRL_REFRESH_SECONDS * 1000).unref() : undefined;
  if (!rootCrl) log.warn('no root CA key in CERTS_DIR: the HTTPS listener checks revocation in the auth hook only');
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.HTTPS_PORT, config.HTTP_HOST, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    /** Stops accepting, lets in-flight requests finish within `graceMs`, then closes what is left. */
    async close(graceMs = 0) {
      unsubscribe();
      clearInterval(timer);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
        setTimeout(() => server.closeAllConnections(), graceMs).unref();
      });
    },
  };
}
