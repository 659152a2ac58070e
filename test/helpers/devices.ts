import crypto from 'node:crypto';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { TestGateway } from './gateway.js';
import type { TestAccount } from './accounts.js';

export interface EnrolledDevice {
  thingId: string;
  /** PEM device certificate */
  certPem: string;
  /** PEM private key (absent when a csr was sent) */
  keyPem: string;
  /** certificate serial, lower-case hex (as stored and listed on the CRL) */
  serial: string;
  /** device CA + root (what a device trusts) */
  caPem: string;
  /** the raw enrollment response */
  response: Record<string, any>;
  /** enrollment token (token flow) */
  enrollmentToken?: string;
}

export interface EnrollOptions {
  /** `claim` (default: a claim group of the account, no capability needed) or `token` (POST /api/v1/things; needs enroll_things) */
  via?: 'claim' | 'token';
  manufacturer?: string;
  model?: string;
  serial?: string;
  /** reuse a claim group's shared secret */
  claimSecret?: string;
  csr?: string;
}

/** Enrolls a device of `account` over real HTTP and returns what the device would keep. */
export async function enrollDevice(gw: TestGateway, account: TestAccount, opts: EnrollOptions = {}): Promise<EnrolledDevice> {
  const manufacturer = opts.manufacturer ?? 'Acme';
  const model = opts.model ?? 'sensor-1';
  const serial = opts.serial ?? `SN-${crypto.randomUUID().slice(0, 8)}`;
  let body: Record<string, unknown>;
  let enrollmentToken: string | undefined;
  if (opts.via === 'token') {
    const res = await gw.http.post('/api/v1/things', { manufacturer, model, serial }, { token: account.operator });
    if (res.status !== 201) throw new Error(`POST /api/v1/things failed: ${res.status} ${res.text}`);
    enrollmentToken = res.body.enrollmentToken;
    body = { enrollmentToken };
  } else {
    const claimSecret = opts.claimSecret ?? (await createClaimGroup(gw, account)).sharedSecret;
    body = { provisioningMethod: 'claim_token', claimSecret, manufacturer, model, serial };
  }
  if (opts.csr) body.csr = opts.csr;
  const res = await gw.http.post('/ddi/v1/enroll', body);
  if (res.status !== 200) throw new Error(`enroll failed: ${res.status} ${res.text}`);
  const cert = new x509.X509Certificate(res.body.certificate);
  return {
    thingId: res.body.twinTopicPrefix.slice('devices/'.length),
    certPem: res.body.certificate,
    keyPem: res.body.privateKey,
    serial: cert.serialNumber.toLowerCase(),
    caPem: res.body.caBundlePem,
    response: res.body,
    enrollmentToken,
  };
}

export async function createClaimGroup(gw: TestGateway, account: TestAccount, input: { name?: string; maxDevices?: number; ttlDays?: number } = {}) {
  const res = await gw.http.post('/api/v1/things/claim-groups', { name: input.name ?? 'line 1', maxDevices: input.maxDevices ?? 1000, ttlDays: input.ttlDays ?? 30 }, { token: account.operator });
  if (res.status !== 201) throw new Error(`claim group create failed: ${res.status} ${res.text}`);
  return res.body as { id: string; sharedSecret: string; maxDevices: number; ttlDays: number; createdAt: string };
}

/** DELETE /api/v1/things/{thingId} as the account's operator. */
export async function revokeDevice(gw: TestGateway, account: TestAccount, thingId: string) {
  const res = await gw.http.delete(`/api/v1/things/${thingId}`, { token: account.operator });
  if (res.status !== 200) throw new Error(`revoke failed: ${res.status} ${res.text}`);
  return res.body as { thingId: string; revokedSerials: string[]; crlNumber: number; disconnected: boolean };
}
