import crypto from 'node:crypto';
import type { DeviceSessions, Gateway, ThingDirectory } from '../gateway.js';
import { conflict, notFound, refused } from '../lib/errors.js';
import { THING_IDENTITY, repo } from './repo.js';
import { accessCodeKind, certificateRevoked, claimGroupKind, deviceCertificateKind, enrollmentTokenKind, settleClaimGroup, thingKind, thingRefusal, type ClaimGroupStatus } from './kinds.js';
import { revokeCertificates } from './certificates.js';
import type { CrlService } from './crl.js';
import type { ModelService } from './models.js';
import { newSecret, sha256 } from '../lib/encoding.js';
import { isoNow } from '../lib/clock.js';
import { isUuid } from '../http/auth/principal.js';
import { denyOpenLicenseRequest } from './ddi.js';

const ACCESS_CODE_TTL_MS = 7 * 86_400_000;

/**
 * Tenant plane of device trust: registering things (enrollment tokens), claim groups, revocation,
 * access codes for joining a thing into another account; and the thing directory other domains use.
 */
export class TrustService implements ThingDirectory {
  constructor(private readonly gw: Gateway, private readonly crl: CrlService, private readonly models: ModelService, private readonly sessions: DeviceSessions) {}

  async accountOf(thingId: string): Promise<string | undefined> {
    if (!isUuid(thingId)) return undefined;
    const [row] = await this.gw.sql<{ account_id: string }[]>`select account_id from things where id = ${thingId}`;
    return row?.account_id;
  }

  async accountsOf(thingIds: string[]): Promise<Map<string, string>> {
    const ids = [...new Set(thingIds.filter(isUuid))];
    if (ids.length === 0) return new Map();
    const rows = await this.gw.sql<{ id: string; account_id: string }[]>`select id, account_id from things where id = any(${ids}::uuid[])`;
    return new Map(rows.map((r) => [r.id, r.account_id]));
  }

  /** POST /api/v1/things: registers a device and hands out its single-use enrollment token. */
  async registerThing(accountId: string, input: { manufacturer: string; model: string; serial: string; metadata?: Record<string, unknown> }) {
    const model = await this.models.resolve(input.model);
    const modelRef = model && model.account_id === accountId ? model : undefined;
    const id = crypto.randomUUID();
    const enrollmentToken = newSecret('et_');
    const issuedAt = this.gw.clock.now();
    const expiresAt = new Date(issuedAt.getTime() + this.gw.config.ENROLLMENT_TOKEN_TTL * 1000).toISOString();
    const modelName = modelRef ? `${modelRef.vid}:${modelRef.pid}` : input.model;
    await this.gw.actors.run(async (uow) => {
      // REGISTERED until the token is used: every thing has its actor from its first row on; the row
      // is born with it (its owner and lifecycle are the machine's), unless the identity is taken
      const born = await uow.createWithRows(thingKind, [{
        id, input: { id, accountId, manufacturer: input.manufacturer, model: modelName, serial: input.serial },
        row: repo.thingRow(uow.sql, { modelId: modelRef?.id ?? null, manufacturer: input.manufacturer, model: modelName, serial: input.serial, metadata: input.metadata ?? {}, tokenHash: sha256(enrollmentToken) }),
      }], THING_IDENTITY);
      if (born.size === 0) throw conflict(`serial ${input.serial} of ${input.manufacturer} ${input.model} is already registered in this account`);
      // the token's lifecycle (its expiry and use are projected onto the row)
      await uow.create(enrollmentTokenKind, id, { thingId: id, accountId, issuedAt: issuedAt.toISOString(), expiresAt });
    });
    return { thingId: id, enrollmentToken, expiresAt };
  }

  /**
   * DELETE /api/v1/things/{id}, in the spec's order: (1) the certificates' REVOKE (their machines)
   * and (2) the regenerated CRL commit in one transaction with the thing's REVOKE; then every node loads
   * the CRL; (3) the broker disconnects the device's session wherever it is (not connected counts
   * as success). The machine decides whether this is a change: revoking again is accepted as a
   * no-op (same CRL number, no broadcast, `revokedSerials: []`) that only repeats step 3.
   */
  async revokeThing(accountId: string, thingId: string, by: string, how: 'REVOKE' | 'ANNIHILATE' = 'REVOKE') {
    const outcome = await this.gw.actors.run(async (uow) => {
      const thing = await uow.load(thingKind, thingId);
      if (!thing || thing.snapshot.context.accountId !== accountId) throw notFound(`thing ${thingId} not found`);
      const at = isoNow(this.gw.clock);
      const current = await repo.currentCertificate(uow.sql, thingId);
      const serial = current && !certificateRevoked(await uow.load(deviceCertificateKind, current.serial)) ? current.serial : null;
      // ANNIHILATE (terminal) revokes too, unless the thing already is; a second one is a 409
      const sent = await uow.trySend(thingKind, thingId, { type: how, at, serial, by });
      if ('refused' in sent && how === 'ANNIHILATE') throw thingRefusal(thingId, sent.snapshot, how);
      if ('refused' in sent || thing.snapshot.context.revokedAt) return { changed: false as const };
      const serials = await revokeCertificates(uow, thingId, at);
      await denyOpenLicenseRequest(uow, thingId, by, at);
      const crl = await this.crl.regenerate(uow.sql);
      return { changed: true as const, serials, number: crl.number };
    });
    let serials: string[] = [];
    let number: number;
    if (outcome.changed) {
      ({ serials, number } = outcome);
      await this.crl.announce(number);
    } else {
      ({ number } = await this.crl.current());
    }
    const { disconnected } = await this.sessions.disconnect(thingId);
    return { thingId, revoked: true as const, revokedSerials: serials, crlNumber: number, disconnected };
  }

  // --- claim groups

  async createClaimGroup(accountId: string, input: { name: string; maxDevices: number; ttlDays: number }) {
    const id = crypto.randomUUID();
    const sharedSecret = newSecret('cgs_');
    const createdAt = isoNow(this.gw.clock);
    await this.gw.actors.run(async (uow) => {
      await repo.insertClaimGroup(uow.sql, { id, accountId, secretHash: sha256(sharedSecret) });
      await uow.create(claimGroupKind, id, { id, accountId, name: input.name, maxDevices: input.maxDevices, ttlDays: input.ttlDays, createdAt });
    });
    return { id, name: input.name, sharedSecret, maxDevices: input.maxDevices, ttlDays: input.ttlDays, createdAt };
  }

  /** The status is the machine's state; a TTL that passed since the last event is recorded first (EXPIRE). */
  async getClaimGroup(accountId: string, id: string) {
    if ((await repo.claimGroupAccount(this.gw.sql, id)) !== accountId) throw notFound(`claim group ${id} not found`);
    await settleClaimGroup(this.gw.actors, id, isoNow(this.gw.clock));
    const stored = await this.gw.actors.get(claimGroupKind, id);
    if (!stored) throw notFound(`claim group ${id} not found`);
    const c = stored.snapshot.context;
    const status = stored.state as ClaimGroupStatus;
    return {
      id, name: c.name, maxDevices: c.maxDevices, ttlDays: c.ttlDays, createdAt: c.createdAt, expiresAt: c.expiresAt,
      consumed: c.consumed, status, revoked: status === 'revoked',
    };
  }

  /** Revokes the shared secret only: certificates already issued through it stay valid. Idempotent. */
  async revokeClaimGroup(accountId: string, id: string, by: string) {
    await this.gw.actors.run(async (uow) => {
      const stored = await uow.load(claimGroupKind, id);
      if (!stored || stored.snapshot.context.accountId !== accountId) throw notFound(`claim group ${id} not found`);
      // revoked is final: the machine refuses a second REVOKE, which is no error here
      await uow.trySend(claimGroupKind, id, { type: 'REVOKE', at: isoNow(this.gw.clock), by });
    });
    return this.getClaimGroup(accountId, id);
  }

  /** TTL sweep (hourly job): groups whose TTL passed go to `expired` (emits claimGroup.expired). The number expired. */
  async expireClaimGroups(): Promise<number> {
    const at = isoNow(this.gw.clock);
    let expired = 0;
    for (const id of await repo.claimGroupsDue(this.gw.sql, at, 1000)) {
      const result = await this.gw.actors.run((uow) => uow.trySend(claimGroupKind, id, { type: 'EXPIRE', at }));
      if (!('refused' in result)) expired += 1;
    }
    return expired;
  }

  // --- joining a thing by access code

  async issueAccessCode(accountId: string, thingId: string) {
    const owner = await this.accountOf(thingId);
    if (owner !== accountId) throw notFound(`thing ${thingId} not found`);
    const accessCode = newSecret('ac_');
    const id = crypto.randomUUID();
    const expiresAt = new Date(this.gw.clock.now().getTime() + ACCESS_CODE_TTL_MS);
    await this.gw.actors.run(async (uow) => {
      await repo.insertAccessCode(uow.sql, { id, hash: sha256(accessCode), thingId, accountId, expiresAt });
      await uow.create(accessCodeKind, id, { id, thingId, issuedByAccount: accountId, expiresAt: expiresAt.toISOString() });
    });
    return { accessCode, expiresAt: expiresAt.toISOString() };
  }

  /**
   * The thing moves to the caller's account if the code's machine accepts its single use (unused,
   * before expiry) and the thing is still owned by the code's issuer; the thing's machine refuses a
   * revoked thing. Concurrent uses of one code queue on its actor: one wins.
   */
  async join(accountId: string, accessCode: string) {
    const id = await repo.accessCodeId(this.gw.sql, sha256(accessCode));
    if (!id) throw refused('access_code is not valid, was already used or has expired');
    return this.gw.actors.run(async (uow) => {
      const at = isoNow(this.gw.clock);
      const used = await uow.trySend(accessCodeKind, id, { type: 'USE', at, accountId });
      if ('refused' in used) throw refused('access_code is not valid, was already used or has expired');
      const { thingId, issuedByAccount } = used.snapshot.context;
      const thing = await uow.load(thingKind, thingId);
      if (!thing || thing.snapshot.context.accountId !== issuedByAccount) throw refused('access_code is no longer valid for this thing');
      const moved = await uow.trySend(thingKind, thingId, { type: 'TRANSFER', at, accountId });
      if ('refused' in moved) throw refused('access_code is no longer valid for this thing: it was revoked');
      return { thingId, accountId };
    });
  }
}
