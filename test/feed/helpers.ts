import { platformToken, registrar } from '../registry/helpers.js';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { signedHeaders, signingTimestamp, type Credentials } from '../../src/clients/svcSigner.js';
import type { ManualClock } from '../../src/lib/clock.js';
import { thingKind } from '../../src/trust/kinds.js';
import type { HttpResponse, TestGateway } from '../helpers/gateway.js';
import type { TestAccount } from '../helpers/accounts.js';

type CryptoKeyPair = crypto.webcrypto.CryptoKeyPair;
const webcrypto = crypto.webcrypto as unknown as crypto.webcrypto.Crypto;

let pid = 0x1000 + Math.floor(Math.random() * 0xd000);

/** A model of the account (unique vid:pid per call). */
export async function createModel(gw: TestGateway, account: TestAccount): Promise<string> {
  const body = { vid: 'FEE0', pid: (pid++ & 0xffff).toString(16).toUpperCase().padStart(4, '0'), name: 'feed model', provisioning_method: 'none' };
  const res = await gw.http.post('/api/v1/models', body, { token: account.admin });
  if (res.status !== 201) throw new Error(`model create failed: ${res.status} ${res.text}`);
  return res.body.id;
}

export interface FactoryService { id: string; creds: Credentials; modelId: string }

/** Registers a factory service of the account (optionally bound to a registrar); returns its signing credentials. */
export async function registerFactoryService(gw: TestGateway, account: TestAccount, o: { registrarId?: string; modelId?: string } = {}): Promise<FactoryService> {
  const modelId = o.modelId ?? (await createModel(gw, account));
  const res = await gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: modelId, endpoint_url: 'https://factory.example', registrar_id: o.registrarId ?? null }, { token: account.admin });
  if (res.status !== 201) throw new Error(`factory service register failed: ${res.status} ${res.text}`);
  return { id: res.body.id, creds: { accessKeyId: res.body.access_key_id, secretAccessKey: res.body.secret_access_key }, modelId };
}

/**
 * A signed request (SVC-HMAC-SHA256) at the clock's time. The manual clock moves one second
 * first, so the same request twice is two signatures, not a replay.
 */
export async function signed(gw: TestGateway, clock: ManualClock, creds: Credentials, method: string, target: string, body?: unknown): Promise<HttpResponse> {
  clock.advance(1000);
  const raw = body === undefined ? undefined : JSON.stringify(body);
  const headers = signedHeaders(creds, { method, target, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(clock.now()), body: raw });
  return gw.http.request(method, target, undefined, { headers: raw === undefined ? headers : { ...headers, 'content-type': 'application/json' }, raw });
}

/**
 * Writes state changes through the actor store (the real path of every transition): `things`
 * new things born in ROLLEDOFF (one change each), `perTx` to a transaction. Returns their ids.
 */
export async function bornThings(gw: TestGateway, accountId: string, count: number, o: { modelId?: string | null; perTx?: number } = {}): Promise<string[]> {
  const ids: string[] = [];
  const perTx = o.perTx ?? 50;
  for (let i = 0; i < count; i += perTx) {
    const batch = Array.from({ length: Math.min(perTx, count - i) }, () => crypto.randomUUID());
    await gw.gw.actors.run(async (uow) => {
      const at = gw.gw.clock.now().toISOString();
      await uow.sql`insert into things ${uow.sql(batch.map((id) => ({ id, account_id: accountId, model_id: o.modelId ?? null, manufacturer: 'Acme', model: 'FEE0:0001', serial: `SN-${id.slice(0, 8)}` })))}`;
      for (const id of batch) {
        await uow.create(thingKind, id, { id, accountId, manufacturer: 'Acme', model: 'FEE0:0001', serial: `SN-${id.slice(0, 8)}`, enrolledBy: 'test', enrolledAt: at });
      }
    });
    ids.push(...batch);
  }
  return ids;
}

/** One lifecycle step of each thing (PROVISION, FACTORY_DONE, ...), `perTx` to a transaction. */
export async function step(gw: TestGateway, ids: string[], type: 'PROVISION' | 'FACTORY_DONE' | 'FACTORY_HANDOVER' | 'ACTIVATE' | 'DEACTIVATE', perTx = 50): Promise<void> {
  for (let i = 0; i < ids.length; i += perTx) {
    await gw.gw.actors.run(async (uow) => {
      for (const id of ids.slice(i, i + perTx)) await uow.send(thingKind, id, { type, at: gw.gw.clock.now().toISOString() });
    });
  }
}

export interface FeedItem { sequence: number; thing_id: string; old_state: string | null; new_state: string; [k: string]: unknown }

// --- an HTTPS webhook receiver with a CA of the test's own

export interface TestCa { caPem: string; caFile: string; keyPem: string; certPem: string; dir: string }

/** A CA and a server certificate for 127.0.0.1 and localhost; the CA PEM written to a file (OUTBOUND_CA_FILE). */
export async function createTestCa(): Promise<TestCa> {
  x509.cryptoProvider.set(webcrypto);
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const now = Date.now();
  const caKeys = (await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as CryptoKeyPair;
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '01', name: 'CN=Webhook Test CA', notBefore: new Date(now - 3600_000), notAfter: new Date(now + 86400_000), keys: caKeys, signingAlgorithm: alg,
    extensions: [new x509.BasicConstraintsExtension(true, 0, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true)],
  });
  const leafKeys = (await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as CryptoKeyPair;
  const leaf = await x509.X509CertificateGenerator.create({
    serialNumber: '02', subject: 'CN=localhost', issuer: ca.subject, notBefore: new Date(now - 3600_000), notAfter: new Date(now + 86400_000),
    publicKey: leafKeys.publicKey, signingKey: caKeys.privateKey, signingAlgorithm: alg,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: '127.0.0.1' }, { type: 'dns', value: 'localhost' }]),
    ],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', leafKeys.privateKey));
  const keyPem = `-----BEGIN PRIVATE KEY-----\n${pkcs8.toString('base64').match(/.{1,64}/g)!.join('\n')}\n-----END PRIVATE KEY-----\n`;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'webhook-ca-'));
  const caPem = ca.toString('pem') + '\n';
  const caFile = path.join(dir, 'ca.pem');
  fs.writeFileSync(caFile, caPem);
  return { caPem, caFile, keyPem, certPem: leaf.toString('pem') + '\n', dir };
}

/** A request a receiver got; `at`: when its body had arrived (Date.now()). */
export interface Received { path: string; headers: Record<string, string>; body: string; status: number; at: number }

/** What the receiver answers on a path: a status, or 'hang' (never answers). */
export type Behaviour = number | 'hang';

/**
 * An HTTPS receiver: records every request, answers per path (default 204). `hold` keeps
 * hanging requests open until `release()`.
 */
export async function startReceiver(ca: TestCa) {
  const received: Received[] = [];
  const behaviour = new Map<string, Behaviour | ((n: number) => Behaviour)>();
  const hanging: (() => void)[] = [];
  const server = https.createServer({ key: ca.keyPem, cert: ca.certPem }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const p = req.url ?? '/';
      const b = behaviour.get(p) ?? 204;
      const n = received.filter((r) => r.path === p).length + 1;
      const answer = typeof b === 'function' ? b(n) : b;
      const rec: Received = { path: p, headers: req.headers as Record<string, string>, body: Buffer.concat(chunks).toString('utf8'), status: answer === 'hang' ? 0 : answer, at: Date.now() };
      received.push(rec);
      if (answer === 'hang') {
        hanging.push(() => res.writeHead(204).end());
        return;
      }
      res.writeHead(answer).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    received,
    url: (p: string) => `https://127.0.0.1:${port}${p}`,
    on: (p: string, b: Behaviour | ((n: number) => Behaviour)) => behaviour.set(p, b),
    at: (p: string) => received.filter((r) => r.path === p),
    release: () => hanging.splice(0).forEach((f) => f()),
    close: () => new Promise<void>((resolve) => {
      hanging.splice(0).forEach((f) => f());
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

/**
 * An independent Standard Webhooks verifier, written from the specification
 * (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md),
 * not from the gateway's signer: the secret is base64 after `whsec_`; the signed content is
 * `${webhook-id}.${webhook-timestamp}.${body}`; `webhook-signature` is a space-separated list of
 * `v1,<base64>`; the timestamp must be within 5 minutes.
 */
export function verifyStandardWebhook(secret: string, headers: Record<string, string | undefined>, body: string, nowSeconds = Math.floor(Date.now() / 1000)): boolean {
  const id = headers['webhook-id'];
  const timestamp = headers['webhook-timestamp'];
  const signatures = headers['webhook-signature'];
  if (!id || !timestamp || !signatures || !/^\d+$/.test(timestamp)) return false;
  if (Math.abs(nowSeconds - Number(timestamp)) > 300) return false;
  if (!secret.startsWith('whsec_')) return false;
  const key = Buffer.from(secret.substring(6), 'base64');
  const expected = crypto.createHmac('sha256', key).update(Buffer.from(`${id}.${timestamp}.`, 'utf8')).update(Buffer.from(body, 'utf8')).digest();
  return signatures.split(' ').some((s) => {
    const [version, sig] = s.split(',', 2);
    if (version !== 'v1' || !sig) return false;
    const given = Buffer.from(sig, 'base64');
    return given.length === expected.length && crypto.timingSafeEqual(given, expected);
  });
}

/** An approved registrar of the account (factory registration and registrar approved by a platform operator): its id. */
export async function approvedRegistrar(gw: TestGateway, account: TestAccount): Promise<string> {
  return (await registrar(gw, account, await platformToken(gw))).id;
}
