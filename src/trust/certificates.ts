import type { ActorStore, UnitOfWork } from '../actors/store.js';
import type { Db } from '../db/client.js';
import { certificateRevoked, deviceCertificateKind, thingKind, thingRevoked } from './kinds.js';
import { repo, type CertificateRow } from './repo.js';

/**
 * Device certificates as actors (machines/deviceCertificate.ts): their rows are inserted by the
 * enrollment and rotation flows, their actors born in the same unit of work; revocation, a
 * renewal's first use and supersession are events the machines decide. The rows' `revoked`,
 * `revoked_at` and `awaiting_first_use` are the store's projection, read by queries (the CRL, the
 * connect path's first-use filter, the registry), never written here.
 */

/** Births the actors of certificates whose rows this unit of work inserted (pipelined on its connection). */
export async function certificatesBorn(uow: UnitOfWork, certs: { serial: string; thingId: string; notAfter: Date }[], at: string, renewal = false): Promise<void> {
  await Promise.all(certs.map((c) => uow.create(deviceCertificateKind, c.serial, {
    serial: c.serial, thingId: c.thingId, issuedAt: at, notAfter: c.notAfter.toISOString(), renewal,
  })));
}

/**
 * REVOKE to each live certificate of the thing (the caller holds the thing's actor); the serials
 * the machines revoked. The projection only names the candidates; each machine decides.
 */
export async function revokeCertificates(uow: UnitOfWork, thingId: string, at: string): Promise<string[]> {
  return sendToLive(uow, thingId, undefined, { type: 'REVOKE', at });
}

/** A renewal's first use: SUPERSEDE to the thing's other live certificates; the serials superseded. */
export async function supersedeOthers(uow: UnitOfWork, thingId: string, renewal: string, at: string): Promise<string[]> {
  return sendToLive(uow, thingId, renewal, { type: 'SUPERSEDE', at, by: renewal });
}

async function sendToLive(uow: UnitOfWork, thingId: string, except: string | undefined, event: { type: 'REVOKE'; at: string } | { type: 'SUPERSEDE'; at: string; by: string }): Promise<string[]> {
  const changed: string[] = [];
  // one after another: a thing has few certificates, and their locks are taken in one order
  for (const serial of await repo.liveCertificates(uow.sql, thingId)) {
    if (serial === except) continue;
    const sent = await uow.trySend(deviceCertificateKind, serial, event);
    if (!('refused' in sent)) changed.push(serial);
  }
  return changed;
}

/** A thing as the device plane judges it: revoked (its machine, or its newest certificate's), and that certificate. */
export interface ThingStanding {
  revoked: boolean;
  /** the thing's newest certificate (undefined: not enrolled) */
  current?: CertificateRow;
}

export async function thingStanding(actors: ActorStore, db: Db, thingId: string): Promise<ThingStanding> {
  const [thing, current] = await Promise.all([actors.get(thingKind, thingId), repo.currentCertificate(db, thingId)]);
  if (thingRevoked(thing)) return { revoked: true, current };
  const cert = current && (await actors.get(deviceCertificateKind, current.serial));
  return { revoked: certificateRevoked(cert), current };
}
