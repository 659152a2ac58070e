import 'reflect-metadata';
import https from 'node:https';
import type { webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';
import mqtt from 'mqtt';
import type { TestGateway } from './gateway.js';

export interface KeyPair { cert: string; key: string }

/** A request on the mutual-TLS listener over a fresh connection (no TLS session reuse). */
export function mtls(gw: TestGateway, method: string, path: string, client: KeyPair, body?: unknown): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: '127.0.0.1', port: gw.httpsPort, path, method, agent: false, ca: gw.gw.pki.rootPem, ...client,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** A fresh key pair and its PKCS#10 request with subject `name` (default: no subject). */
export async function newKey(name = '', algorithm: webcrypto.EcKeyGenParams | webcrypto.RsaHashedKeyGenParams = { name: 'ECDSA', namedCurve: 'P-256' }): Promise<{ key: string; csr: string }> {
  const keys = await crypto.subtle.generateKey(algorithm, true, ['sign', 'verify']) as webcrypto.CryptoKeyPair;
  const signingAlgorithm = algorithm.name === 'ECDSA' ? { name: 'ECDSA', hash: 'SHA-256' } : algorithm;
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({ name, keys, signingAlgorithm });
  const pkcs8 = Buffer.from(await crypto.subtle.exportKey('pkcs8', keys.privateKey)).toString('base64');
  return { key: `-----BEGIN PRIVATE KEY-----\n${pkcs8.match(/.{1,64}/g)!.join('\n')}\n-----END PRIVATE KEY-----\n`, csr: csr.toString('pem') };
}

/** 'connected' or 'refused' (TLS handshake or CONNACK), a fresh MQTT 5 connection each time (closed again). */
export async function mqttOutcome(gw: TestGateway, thingId: string, pair: KeyPair): Promise<'connected' | 'refused'> {
  const client = mqtt.connect(`mqtts://127.0.0.1:${gw.mqttPort}`, {
    key: pair.key, cert: pair.cert, ca: gw.gw.pki.bundlePem, servername: 'localhost', rejectUnauthorized: true,
    clientId: thingId, username: thingId, protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 5000,
  });
  const outcome = await new Promise<'connected' | 'refused'>((resolve) => {
    client.once('connect', () => resolve('connected'));
    client.once('error', () => resolve('refused'));
    client.once('close', () => resolve('refused'));
  });
  await client.endAsync(true);
  return outcome;
}
