import crypto from 'node:crypto';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { Gateway, IdentityBlacklist, MqttEndpoint } from '../gateway.js';
import type { UnitOfWork } from '../actors/store.js';
import { conflict, invalid, refused, unauthenticated, type DomainError } from '../lib/errors.js';
import { THING_IDENTITY, repo, type ClaimContextRow, type Identity, type ModelRow, type ThingRow } from './repo.js';
import { isUuid } from '../http/auth/principal.js';
import { claimRefusal, enrollmentTokenKind, settleClaimGroup, thingKind, thingRevoked } from './kinds.js';
import { certificatesBorn, thingStanding } from './certificates.js';
import { parseDescriptor, type ModelService } from './models.js';
import { safeEqual, sha256 } from '../lib/encoding.js';
import { isoNow } from '../lib/clock.js';
import { unstorableField } from '../lib/text.js';
import type { Sealer } from '../pki/sealer.js';
import type { EnrollBody, EnrollmentResponse } from './schemas.js';
import { ClaimBatcher } from './claimBatch.js';
import { ClaimLookups } from './claimLookups.js';

/** A concurrent enrollment of the same identity committed first (the transaction rolls back). */
class AlreadyEnrolled extends Error {}

interface Issued { pem: string; serial: string; notAfter: Date; privateKeyPem?: string }

/** `enrolled_by` of things enrolled through POST /api/v1/enrollments */
export const FACTORY_METHOD = 'factory';

/** Methods where the device proved who it is: a repeat enrollment gets its certificate back. */
const PROVING_METHODS = new Set(['claim_token', 'symmetric_key', 'certificate', 'webhook']);

/**
 * POST /ddi/v1/enroll: one URL for every provisioning method. The token flow is chosen by an
 * `enrollmentToken`; otherwise the model named by the device decides the method (an unregistered
 * model may still enroll with a claim secret: the claim group speaks for the tenant).
 * Certificates are signed before the transaction (native RSA off the event loop, so the locks
 * are held for a few statements only); a signature that loses a race is discarded, never stored
 * nor returned. Claims commit in batches (claimBatch.ts).
 */
export class EnrollmentService {
  private readonly batcher: ClaimBatcher;
  private readonly lookups: ClaimLookups;

  constructor(private readonly gw: Gateway, private readonly models: ModelService, private readonly sealer: Sealer, private readonly mqtt: MqttEndpoint, private readonly blacklist: IdentityBlacklist) {
    this.batcher = new ClaimBatcher(gw);
    this.lookups = new ClaimLookups(gw.sql);
  }

  async enroll(body: EnrollBody): Promise<EnrollmentResponse> {
    // before any statement: a value Postgres cannot take must not fail a shared claim batch
    const bad = unstorableField(body);
    if (bad) throw invalid(`${bad} must be Unicode text without NUL characters or unpaired surrogates`);
    if (body.enrollmentToken) return this.byToken(body.enrollmentToken, body.csr);
    const { manufacturer, model: modelRef, serial } = body;
    if (!manufacturer || !modelRef || !serial) throw invalid('manufacturer, model and serial are required (or an enrollmentToken)');
    await this.blacklist.refuseListed(modelRef, serial);
    if (body.claimSecret && (!body.provisioningMethod || body.provisioningMethod === 'claim_token')) {
      // the hot path: one query answers secret, group state, model and an earlier enrollment
      const ctx = await this.lookups.lookup({ hash: sha256(body.claimSecret), ref: this.modelRef(modelRef), device: { manufacturer, serial } });
      if (!ctx.model_id || ctx.model_method === 'claim_token') return this.byClaim(body, ctx, { manufacturer, model: ctx.model_name, serial });
    }
    const model = await this.models.resolve(modelRef);
    const method = model?.provisioning_method ?? (body.claimSecret || body.provisioningMethod === 'claim_token' ? 'claim_token' : undefined);
    if (!method) throw invalid(`model ${modelRef} is not registered; enroll with a claimSecret or an enrollmentToken`);
    if (body.provisioningMethod && body.provisioningMethod !== method) {
      throw invalid(`model ${modelRef} enrolls by ${method}, not ${body.provisioningMethod}`);
    }
    const modelName = model ? `${model.vid}:${model.pid}` : (parseDescriptor(modelRef) ? `${parseDescriptor(modelRef)!.vid}:${parseDescriptor(modelRef)!.pid}` : modelRef);
    // claims with a secret took the path above
    if (method === 'claim_token') throw invalid('claimSecret is required for claim_token enrollment');
    await this.verify(method, model!, body, { manufacturer, serial });
    return this.enrollIdentity({ accountId: model!.account_id, manufacturer, model: modelName, serial }, model!, method, body.csr);
  }

  /**
   * POST /api/v1/enrollments: the factory-side way in. The account (its user or its model's factory
   * service) vouches for the device, so no device proof is asked; the identity mapping and the
   * certificate issuance are the device path's. A known identity answers as a repeat (its
   * certificate; `created: false`).
   */
  async enrollByAccount(identity: Identity, model: ModelRow, csr?: string): Promise<{ created: boolean; thingId: string; response: EnrollmentResponse }> {
    await this.blacklist.refuseListed(identity.model, identity.serial);
    const existing = await repo.thingByIdentity(this.gw.sql, identity);
    if (existing) return { created: false, thingId: existing.id, response: await this.repeat(existing, csr) };
    const thingId = crypto.randomUUID();
    const issued = await this.issue(thingId, csr);
    const { accountId, ...tuple } = identity;
    try {
      const response = await this.gw.actors.run(async (uow) => {
        const at = isoNow(this.gw.clock);
        if (!(await this.birth(uow, { id: thingId, accountId, modelId: model.id, ...tuple }, FACTORY_METHOD, at, issued))) throw new AlreadyEnrolled();
        return this.response(thingId, issued);
      });
      return { created: true, thingId, response };
    } catch (err) {
      if (!(err instanceof AlreadyEnrolled)) throw err;
      const winner = await repo.thingByIdentity(this.gw.sql, identity);
      if (!winner) throw conflict('enrollment raced with another one; retry');
      return { created: false, thingId: winner.id, response: await this.repeat(winner, csr) };
    }
  }

  // --- flows

  /**
   * The enrollmentToken machine decides: USE is accepted once, before the TTL. A token that is
   * refused while still `issued` has expired, which EXPIRE records (committed, then 403). The
   * certificate is signed only when the machine would accept USE (a read), before the transaction.
   * The thing's machine says whether it is revoked (read first, then again under its lock).
   */
  private async byToken(token: string, csr?: string): Promise<EnrollmentResponse> {
    const thing = await repo.thingByToken(this.gw.sql, sha256(token));
    if (!thing) throw unauthenticated('unknown enrollment token', { guess: { scheme: 'enrollment-token', kind: 'unknown-identifier' } });
    const at = isoNow(this.gw.clock);
    const [machine, tokenActor] = await Promise.all([this.gw.actors.get(thingKind, thing.id), this.gw.actors.get(enrollmentTokenKind, thing.id)]);
    if (thingRevoked(machine)) throw refused('this thing was revoked');
    await this.blacklist.refuseListed(thing.model, thing.serial);
    const issued = tokenActor?.snapshot.can({ type: 'USE', at }) ? await this.issue(thing.id, csr) : undefined;
    const outcome = await this.gw.actors.run(async (uow): Promise<EnrollmentResponse | DomainError> => {
      // the thing's actor first (the lock revocation takes)
      const locked = await uow.load(thingKind, thing.id);
      if (!locked || thingRevoked(locked)) return refused('this thing was revoked');
      const used = await uow.trySend(enrollmentTokenKind, thing.id, { type: 'USE', at });
      if ('refused' in used) {
        const state = used.snapshot.can({ type: 'EXPIRE', at }) ? (await uow.send(enrollmentTokenKind, thing.id, { type: 'EXPIRE', at })).state : used.state;
        return refused(state === 'used' ? 'enrollment token was already used' : 'enrollment token has expired');
      }
      // the machine accepted USE meanwhile (it refused a moment ago): sign on the next try
      if (!issued) return conflict('enrollment token changed meanwhile; retry');
      // the REGISTERED thing enrolls (its machine records how and when: projected enrolled_by/at);
      // it refuses a revoked one (thrown: nothing commits)
      const enrolled = await uow.trySend(thingKind, thing.id, { type: 'ENROLL', at, method: 'enrollment_token' });
      if ('refused' in enrolled) throw refused('this thing was revoked');
      await repo.insertCertificate(uow.sql, { thingId: thing.id, ...this.certificateRow(issued) });
      await certificatesBorn(uow, [{ serial: issued.serial, thingId: thing.id, notAfter: issued.notAfter }], at);
      return this.response(thing.id, issued);
    });
    if (outcome instanceof Error) throw outcome;
    return outcome;
  }

  /** What the device calls its model, for the claim query: a descriptor, an id, or a free name. */
  private modelRef(ref: string): { vid?: string; pid?: string; id?: string; name: string } {
    const d = parseDescriptor(ref);
    if (d) return { ...d, name: `${d.vid}:${d.pid}` };
    return isUuid(ref) ? { id: ref.toLowerCase(), name: ref } : { name: ref };
  }

  private async byClaim(body: EnrollBody, group: ClaimContextRow, tuple: Omit<Identity, 'accountId'>): Promise<EnrollmentResponse> {
    const hash = sha256(body.claimSecret!);
    if (!group.id || !group.account_id || !group.secret_hash || !safeEqual(group.secret_hash, hash)) throw refused('claim secret is not valid', { guess: { scheme: 'claim-secret', kind: 'wrong-secret' } });
    if (group.model_account_id && group.model_account_id !== group.account_id) throw refused('claim secret is not valid for this model');
    // The group's projected state is its machine's last decision. A new claim goes to the batch,
    // where the machine decides TTL and cap; a repeat, or a claim on a capped group, asks the
    // machine here whether the TTL passed meanwhile (expiry outranks both).
    let state = group.state ?? undefined;
    if (state === 'capped' || (state === 'active' && group.existing)) state = await settleClaimGroup(this.gw.actors, group.id, isoNow(this.gw.clock));
    if (state !== 'active' && !(state === 'capped' && group.existing)) throw claimRefusal(state);
    const identity = { accountId: group.account_id, ...tuple };
    if (group.existing) return this.repeat(await this.thingOf(group.existing), body.csr);

    const thingId = crypto.randomUUID();
    const issued = await this.issue(thingId, body.csr);
    const outcome = await this.batcher.submit({
      groupId: group.id,
      thing: { id: thingId, accountId: identity.accountId, modelId: group.model_id, ...tuple },
      certificate: this.certificateRow(issued),
    });
    if (outcome === 'claimed') return this.response(thingId, issued);
    if (outcome !== 'repeat') throw outcome;
    // a concurrent claim of the same identity committed first: answer as its repeat
    const winner = await repo.thingByIdentity(this.gw.sql, identity);
    if (!winner) throw conflict('enrollment raced with another one; retry');
    return this.repeat(winner, body.csr);
  }

  private async enrollIdentity(identity: Identity, model: ModelRow, method: string, csr?: string): Promise<EnrollmentResponse> {
    const existing = await repo.thingByIdentity(this.gw.sql, identity);
    if (existing) return this.repeatFor(method, existing, csr);
    const thingId = crypto.randomUUID();
    const issued = await this.issue(thingId, csr);
    const { accountId, ...tuple } = identity;
    return this.firstEnrollment(identity, csr, () => this.gw.actors.run(async (uow) => {
      const at = isoNow(this.gw.clock);
      if (!(await this.birth(uow, { id: thingId, accountId, modelId: model.id, ...tuple }, method, at, issued))) throw new AlreadyEnrolled();
      return this.response(thingId, issued);
    }), method);
  }

  /** Runs a first enrollment; when a concurrent one of the same identity won, answers as a repeat. */
  private async firstEnrollment(identity: Identity, csr: string | undefined, work: () => Promise<EnrollmentResponse>, method = 'claim_token'): Promise<EnrollmentResponse> {
    try {
      return await work();
    } catch (err) {
      if (!(err instanceof AlreadyEnrolled)) throw err;
      const winner = await repo.thingByIdentity(this.gw.sql, identity);
      if (!winner) throw conflict('enrollment raced with another one; retry');
      return this.repeatFor(method, winner, csr);
    }
  }

  private async thingOf(id: string): Promise<ThingRow> {
    const thing = await repo.thing(this.gw.sql, id);
    if (!thing) throw conflict('thing changed meanwhile; retry');
    return thing;
  }

  private repeatFor(method: string, thing: ThingRow, csr?: string): Promise<EnrollmentResponse> {
    if (!PROVING_METHODS.has(method)) throw conflict(`serial ${thing.serial} of ${thing.model} is already enrolled`);
    return this.repeat(thing, csr);
  }

  /** Idempotent re-enrollment: the same thingId and certificate, nothing re-issued (the thing's and its certificate's machines: not revoked). */
  private async repeat(thing: ThingRow, csr?: string): Promise<EnrollmentResponse> {
    const { revoked, current: cert } = await thingStanding(this.gw.actors, this.gw.sql, thing.id);
    if (revoked) throw refused('this thing was revoked; it cannot enroll again');
    if (!cert) throw conflict(`thing ${thing.id} is registered but not enrolled; enroll with its enrollment token`);
    if (csr) {
      const spki = await this.csrKey(csr);
      const issuedKey = Buffer.from(new x509.X509Certificate(cert.pem).publicKey.rawData);
      if (!spki.equals(issuedKey)) throw conflict('this device is already enrolled with another key');
    }
    const privateKeyPem = !csr && cert.sealed_private_key ? this.sealer.open(cert.sealed_private_key) : undefined;
    return this.response(thing.id, { pem: cert.pem, serial: cert.serial, notAfter: cert.not_after, privateKeyPem });
  }

  // --- method checks

  private async verify(method: string, model: ModelRow, body: EnrollBody, device: { manufacturer: string; serial: string }): Promise<void> {
    const settings = model.provisioning as Record<string, any>;
    switch (method) {
      case 'none':
        return;
      case 'auto': {
        if (settings.serialPattern && !new RegExp(`^(?:${settings.serialPattern})$`).test(device.serial)) {
          throw refused(`serial ${device.serial} does not match the model's serial pattern`);
        }
        if (settings.manufacturers && !(settings.manufacturers as string[]).includes(device.manufacturer)) {
          throw refused(`manufacturer ${device.manufacturer} is not allowed for this model`);
        }
        return;
      }
      case 'symmetric_key': {
        if (!body.derivedKey) throw invalid('derivedKey is required for symmetric_key enrollment');
        const registrationId = body.registrationId ?? device.serial;
        const groupKey = Buffer.from(this.models.secretOf(model), 'base64');
        const expected = crypto.createHmac('sha256', groupKey).update(registrationId, 'utf8').digest();
        if (!safeEqual(expected, Buffer.from(body.derivedKey, 'base64'))) throw refused('derivedKey does not match the registrationId', { guess: { scheme: 'symmetric-key', kind: 'wrong-secret' } });
        return;
      }
      case 'certificate':
        return this.verifyBirthCertificate(settings.manufacturerCaPem as string, body);
      case 'webhook':
        return this.askApprovalWebhook(model, device);
      default:
        throw refused(`provisioning method ${method} is not supported`);
    }
  }

  /** The device shows a certificate from the model's manufacturer CA and a CSR signed by the same key. */
  private async verifyBirthCertificate(caPem: string, body: EnrollBody): Promise<void> {
    if (!body.deviceCertificate || !body.csr) throw invalid('certificate enrollment needs deviceCertificate and a csr signed with its key');
    let cert: x509.X509Certificate;
    try { cert = new x509.X509Certificate(body.deviceCertificate); } catch { throw invalid('deviceCertificate is not a PEM certificate'); }
    const ca = new x509.X509Certificate(caPem);
    const now = new Date();
    const signed = cert.issuer === ca.subject && (await cert.verify({ publicKey: ca, date: now }).catch(() => false));
    if (!signed) throw refused('deviceCertificate is not a valid certificate of the model\'s manufacturer CA');
    const spki = await this.csrKey(body.csr);
    if (!spki.equals(Buffer.from(cert.publicKey.rawData))) throw refused('the csr is not signed with the key of deviceCertificate');
  }

  /** Standard Webhooks signed POST; anything but a 2xx `{ "approved": true }` in time refuses (fail closed). */
  private async askApprovalWebhook(model: ModelRow, device: { manufacturer: string; serial: string }): Promise<void> {
    const settings = model.provisioning as { approvalUrl: string; timeoutMs?: number };
    const id = `msg_${crypto.randomUUID()}`;
    const timestamp = Math.floor(Date.now() / 1000).toString();
    const payload = JSON.stringify({ type: 'enrollment.approval', modelId: model.id, descriptor: `${model.vid}:${model.pid}`, manufacturer: device.manufacturer, serial: device.serial });
    const key = Buffer.from(this.models.secretOf(model).replace(/^whsec_/, ''), 'base64');
    const signature = crypto.createHmac('sha256', key).update(`${id}.${timestamp}.${payload}`).digest('base64');
    let approved = false;
    let why = 'did not approve';
    try {
      const res = await fetch(settings.approvalUrl, {
        method: 'POST', body: payload, redirect: 'error',
        headers: { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': `v1,${signature}` },
        signal: AbortSignal.timeout(settings.timeoutMs ?? 5000),
      });
      const answer = (await res.json().catch(() => undefined)) as { approved?: unknown } | undefined;
      approved = res.ok && answer?.approved === true;
      if (!res.ok) why = `answered ${res.status}`;
    } catch (err) {
      why = (err as Error).name === 'TimeoutError' ? 'timed out' : 'could not be reached';
    }
    if (!approved) throw refused(`enrollment refused: the model's approval webhook ${why}`);
  }

  // --- issuance

  private async csrKey(csr: string): Promise<Buffer> {
    try {
      return await this.gw.pki.spkiFromCsr(csr);
    } catch {
      throw invalid('csr is not a PEM PKCS#10 request with a valid signature');
    }
  }

  private async issue(thingId: string, csr?: string): Promise<Issued> {
    if (csr) return this.gw.pki.signDeviceCertificate(thingId, await this.csrKey(csr), this.gw.config.DEVICE_CERT_DAYS);
    const key = await this.gw.pki.generateDeviceKeyPair();
    const cert = await this.gw.pki.signDeviceCertificate(thingId, key.spki, this.gw.config.DEVICE_CERT_DAYS);
    return { ...cert, privateKeyPem: key.privateKeyPem };
  }

  private certificateRow(issued: Issued) {
    return {
      serial: issued.serial, pem: issued.pem, notAfter: issued.notAfter,
      sealedKey: issued.privateKeyPem ? this.sealer.seal(issued.privateKeyPem) : null,
    };
  }

  /**
   * Births the Thing in ROLLEDOFF with its row (owner and enrollment projected by the store), then its
   * certificate (row, and actor in use); false, nothing written, when the identity is taken (after
   * waiting for a concurrent inserter of it to finish).
   */
  private async birth(uow: UnitOfWork, thing: Omit<Identity, 'accountId'> & { id: string; accountId: string; modelId: string | null }, method: string, at: string, issued: Issued): Promise<boolean> {
    const born = await uow.createWithRows(thingKind, [{
      id: thing.id,
      input: { id: thing.id, accountId: thing.accountId, manufacturer: thing.manufacturer, model: thing.model, serial: thing.serial, enrolledBy: method, enrolledAt: at },
      row: repo.thingRow(uow.sql, thing),
    }], THING_IDENTITY);
    if (born.size === 0) return false;
    await repo.insertCertificate(uow.sql, { thingId: thing.id, ...this.certificateRow(issued) });
    await certificatesBorn(uow, [{ serial: issued.serial, thingId: thing.id, notAfter: issued.notAfter }], at);
    return true;
  }

  private response(thingId: string, issued: Issued): EnrollmentResponse {
    const { config, pki } = this.gw;
    const brokerPort = config.MQTT_PUBLIC_PORT ?? (config.MQTT_PORT === 0 ? this.mqtt.port : config.MQTT_PORT) ?? 8883;
    return {
      thingId,
      certificate: issued.pem,
      ...(issued.privateKeyPem ? { privateKey: issued.privateKeyPem } : {}),
      caCertificate: pki.deviceCaPem,
      mqttBrokerUrl: config.MQTT_PUBLIC_HOST,
      mqttBrokerPort: brokerPort,
      caBundlePem: pki.bundlePem,
      twinTopicPrefix: `devices/${thingId}`,
    };
  }
}

