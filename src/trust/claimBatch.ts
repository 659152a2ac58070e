import type { Gateway } from '../gateway.js';
import type { UnitOfWork } from '../actors/store.js';
import { refused, type DomainError } from '../lib/errors.js';
import { repo } from './repo.js';
import { claimGroupKind, claimGroupStatus, thingKind } from './kinds.js';

export interface PendingClaim {
  groupId: string;
  thing: { id: string; accountId: string; modelId: string | null; manufacturer: string; model: string; serial: string };
  certificate: { serial: string; pem: string; sealedKey: Buffer | null; notAfter: Date };
}

/** `claimed`: committed; `repeat`: the identity was enrolled by someone else first; or the group's refusal. */
export type ClaimOutcome = 'claimed' | 'repeat' | DomainError;

const MAX_BATCH = 64;
/** batches in flight per node: one forms while another commits */
const MAX_TRANSACTIONS = 2;

/**
 * Commits concurrent claims together: while a transaction runs (two at most per node), new claims
 * queue, and the next transaction takes them all (up to 64). One transaction locks each group involved (in id order),
 * inserts every thing and certificate in one statement (identity order), sends one CLAIM_MANY per
 * group and births the Thing actors. A lone claim commits at once (no waiting for company).
 * Each caller's response still waits for its own durable commit. Nothing is shared across nodes:
 * the row locks and the unique identity index keep batches of different nodes correct.
 */
export class ClaimBatcher {
  private queue: { claim: PendingClaim; resolve(o: ClaimOutcome): void; reject(err: unknown): void }[] = [];
  private drains = 0;

  constructor(private readonly gw: Gateway) {}

  submit(claim: PendingClaim): Promise<ClaimOutcome> {
    return new Promise((resolve, reject) => {
      this.queue.push({ claim, resolve, reject });
      if (this.drains < MAX_TRANSACTIONS) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.drains += 1;
    try {
      while (this.queue.length) {
        const batch = this.queue.splice(0, MAX_BATCH);
        try {
          const outcomes = await this.gw.actors.run((uow) => this.commit(uow, batch.map((b) => b.claim)));
          batch.forEach((b, i) => b.resolve(outcomes[i]));
        } catch (err) {
          for (const b of batch) b.reject(err);
        }
      }
    } finally {
      this.drains -= 1;
    }
  }

  private async commit(uow: UnitOfWork, claims: PendingClaim[]): Promise<ClaimOutcome[]> {
    const outcomes: ClaimOutcome[] = new Array(claims.length);
    const now = new Date();
    // 1. lock the groups (id order: no deadlock between batches), read status and room left
    const room = new Map<string, number>();
    const refusal = new Map<string, DomainError>();
    for (const id of [...new Set(claims.map((c) => c.groupId))].sort()) {
      const g = await uow.load(claimGroupKind, id);
      const status = g ? claimGroupStatus(g.state, g.snapshot.context, now) : 'revoked';
      room.set(id, status === 'active' ? g!.snapshot.context.maxDevices - g!.snapshot.context.consumed : 0);
      refusal.set(id, refused(`claim group is ${status === 'active' ? 'capped' : status}${status === 'active' || status === 'capped' ? ': maxDevices reached' : ''}`,
        { extra: { claimGroupStatus: status === 'active' ? 'capped' : status } }));
    }
    // 2. one identity once per batch; later duplicates share the first one's fate
    const first = new Map<string, number>();
    const duplicates: [number, number][] = [];
    const candidates: number[] = [];
    claims.forEach((c, i) => {
      const key = JSON.stringify([c.thing.accountId, c.thing.manufacturer, c.thing.model, c.thing.serial]);
      const earlier = first.get(key);
      if (earlier !== undefined) duplicates.push([i, earlier]);
      else { first.set(key, i); candidates.push(i); }
    });
    // 3. insert things + certificates; identities already taken become repeats
    const inserted = await repo.insertEnrolledThings(uow.sql, candidates.map((i) => ({
      ...claims[i].thing, enrolledBy: 'claim_token', claimGroupId: claims[i].groupId,
      certSerial: claims[i].certificate.serial, pem: claims[i].certificate.pem, sealedKey: claims[i].certificate.sealedKey, notAfter: claims[i].certificate.notAfter,
    })));
    // 4. the cap, in arrival order; rows of refused claims are removed again
    const accepted = new Map<string, string[]>();
    const over: string[] = [];
    for (const i of candidates) {
      const c = claims[i];
      if (!inserted.has(c.thing.id)) { outcomes[i] = 'repeat'; continue; }
      const left = room.get(c.groupId)!;
      if (left <= 0) { outcomes[i] = refusal.get(c.groupId)!; over.push(c.thing.id); continue; }
      room.set(c.groupId, left - 1);
      outcomes[i] = 'claimed';
      accepted.set(c.groupId, [...(accepted.get(c.groupId) ?? []), c.thing.id]);
    }
    for (const [i, earlier] of duplicates) outcomes[i] = outcomes[earlier] === 'claimed' ? 'repeat' : outcomes[earlier];
    // 5. the machines decide too (they must agree), and the Things are born, pipelined
    const at = now.toISOString();
    await Promise.all([
      over.length ? repo.deleteEnrolledThings(uow.sql, over) : Promise.resolve(),
      ...[...accepted].map(([groupId, thingIds]) => uow.send(claimGroupKind, groupId, { type: 'CLAIM_MANY', at, thingIds })),
      ...claims.filter((_, i) => outcomes[i] === 'claimed').map((c) => uow.create(thingKind, c.thing.id, {
        id: c.thing.id, accountId: c.thing.accountId, manufacturer: c.thing.manufacturer, model: c.thing.model, serial: c.thing.serial,
        enrolledBy: 'claim_token', enrolledAt: at,
      })),
    ]);
    return outcomes;
  }
}
