import type { Gateway } from '../gateway.js';
import type { SnapshotFrom } from 'xstate';
import type { UnitOfWork } from '../actors/store.js';
import { DomainError, invalid, unprocessable } from '../lib/errors.js';
import { isoNow } from '../lib/clock.js';
import { unstorableField } from '../lib/text.js';
import { THING_IDENTITY, identityKey, repo } from './repo.js';
import { claimGroupKind, claimRefusal, deviceCertificateKind, thingKind } from './kinds.js';

export interface PendingClaim {
  groupId: string;
  thing: { id: string; accountId: string; modelId: string | null; manufacturer: string; model: string; serial: string };
  certificate: { serial: string; pem: string; sealedKey: Buffer | null; notAfter: Date };
}

/** `claimed`: committed; `repeat`: the identity was enrolled by someone else first; or why the claim was refused. */
export type ClaimOutcome = 'claimed' | 'repeat' | DomainError;

const MAX_BATCH = 64;
/**
 * Batches in flight per node: one commits while the next forms. Two in flight took the same group
 * locks (every batch of a busy account touches most of its groups), so the second waited for the
 * first and both were half as large: bench:enroll, 32 in flight, same run: 684/s with two against
 * 796/s with one, and 10 to 25% less CPU per enrollment (docs/benchmarks.md).
 */
const MAX_TRANSACTIONS = 1;

/** A claim group as the batch loaded (and locked) it. */
type LoadedGroup = NonNullable<Awaited<ReturnType<UnitOfWork['load']>>> & { snapshot: SnapshotFrom<typeof claimGroupKind.machine> };

/** A concurrent batch (another node's, through another group of the same account) enrolled an identity this one was about to. */
class IdentityRace extends Error {}

/**
 * Commits concurrent claims together: while a transaction runs (one per node), new claims
 * queue, and the next transaction takes them all (up to 64). A lone claim commits at once.
 * One transaction locks each group involved (id order), leaves out identities already enrolled
 * (repeats), sends one CLAIM_MANY per group (the machine takes as many as fit and names them),
 * inserts the accepted things and certificates in one statement (identity order) and births
 * the Thing and certificate actors. Nothing is written for a refused claim.
 *
 * Isolation: a claim is validated before it joins a batch, and when a batch fails anyway its
 * members are committed again one by one, so a bad claim fails alone. Nothing is shared across
 * nodes: the group row locks and the unique identity index keep batches of different nodes correct.
 */
export class ClaimBatcher {
  private queue: { claim: PendingClaim; resolve(o: ClaimOutcome): void; reject(err: unknown): void }[] = [];
  private drains = 0;

  constructor(private readonly gw: Pick<Gateway, 'actors' | 'clock' | 'log'>) {}

  submit(claim: PendingClaim): Promise<ClaimOutcome> {
    const bad = unstorableField(claim.thing);
    if (bad) return Promise.resolve(invalid(`${bad} must be Unicode text without NUL characters or unpaired surrogates`));
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
          if (batch.length === 1 && !(err instanceof IdentityRace)) settleAlone(batch[0], err);
          else {
            // something validation did not catch (or a race): find the member at fault
            this.gw.log.warn({ claims: batch.length, code: (err as { code?: unknown }).code ?? (err as Error).name }, 'claim batch failed; committing its claims one by one');
            for (const b of batch) await this.commitAlone(b);
          }
        }
      }
    } finally {
      this.drains -= 1;
    }
  }

  /** After a failed batch: one member in its own transaction, so only a bad member fails. */
  private async commitAlone(member: (typeof this.queue)[number]): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        const [outcome] = await this.gw.actors.run((uow) => this.commit(uow, [member.claim]));
        return member.resolve(outcome);
      } catch (err) {
        if (err instanceof IdentityRace && attempt < 3) continue;
        return settleAlone(member, err);
      }
    }
  }

  private async commit(uow: UnitOfWork, claims: PendingClaim[]): Promise<ClaimOutcome[]> {
    const outcomes: ClaimOutcome[] = new Array(claims.length);
    const at = isoNow(this.gw.clock);
    // 1. lock the groups (one statement, id order: no deadlock between batches), and read the
    //    identities taken already (pipelined behind it on the transaction's connection: read
    //    after the locks, so committed claims of the same group are seen)
    const groupIds = [...new Set(claims.map((c) => c.groupId))].sort();
    const firstOfIdentity = new Map<string, PendingClaim['thing']>();
    for (const c of claims) if (!firstOfIdentity.has(identityKey(c.thing))) firstOfIdentity.set(identityKey(c.thing), c.thing);
    const [loaded, taken] = await Promise.all([
      uow.loadMany(claimGroupKind, groupIds),
      repo.takenIdentities(uow.sql, [...firstOfIdentity.values()]),
    ]);
    // 2. one identity once per batch (later duplicates share the first one's fate); identities
    //    enrolled already are repeats (committed ones: claimers of the same group wait on its lock)
    const first = new Map<string, number>();
    const duplicates: [number, number][] = [];
    const candidates: number[] = [];
    claims.forEach((c, i) => {
      const key = identityKey(c.thing);
      const earlier = first.get(key);
      if (earlier !== undefined) duplicates.push([i, earlier]);
      else if (!loaded.has(c.groupId)) outcomes[i] = claimRefusal(undefined);
      else { first.set(key, i); candidates.push(i); }
    });
    // 3. each group's machine takes the claims that fit, in arrival order; a group whose machine
    //    refuses CLAIM_MANY but accepts EXPIRE has outlived its TTL, which EXPIRE records.
    //    All groups' decisions are written together (trySendMany), pipelined with the births below.
    const byGroup = groupIds
      .map((groupId) => ({ groupId, members: candidates.filter((i) => claims[i].groupId === groupId && !taken.has(identityKey(claims[i].thing))) }))
      .filter((g) => g.members.length)
      .map((g) => {
        const group = loaded.get(g.groupId) as LoadedGroup;
        const claim = { type: 'CLAIM_MANY' as const, at, thingIds: g.members.map((i) => claims[i].thing.id) };
        const event = group.snapshot.can(claim) ? claim : group.snapshot.can({ type: 'EXPIRE', at }) ? { type: 'EXPIRE' as const, at } : claim;
        return { ...g, group, event };
      });
    const { decisions, written } = uow.trySendMany(claimGroupKind, byGroup.map((g) => ({ id: g.groupId, event: g.event, loaded: g.group })));
    // the machines' answers are known before anything is written: the births go out right behind the writes
    const accepted: number[] = [];
    byGroup.forEach(({ members, event }, g) => {
      const d = decisions[g];
      const claimed = !d.refused && event.type === 'CLAIM_MANY' ? d.emitted.find((e) => e.type === 'claimGroup.claimedMany')?.thingIds as string[] | undefined : undefined;
      const taking = new Set(claimed ?? []);
      for (const i of members) {
        if (taking.has(claims[i].thing.id)) accepted.push(i);
        else outcomes[i] = claimRefusal(d.state);
      }
    });
    accepted.sort((x, y) => x - y);
    for (const i of candidates) if (taken.has(identityKey(claims[i].thing))) outcomes[i] = 'repeat';
    // 4. the accepted Things are born with their rows (owner and enrollment projected), in one statement,
    //    in identity order (concurrent batches take the unique-index entries in the same order)
    const births = accepted.map((i) => claims[i])
      .map((c) => ({ c, key: identityKey(c.thing) }))
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
      .map(({ c: { thing: t, groupId } }) => ({
        id: t.id,
        input: { id: t.id, accountId: t.accountId, manufacturer: t.manufacturer, model: t.model, serial: t.serial, enrolledBy: 'claim_token', enrolledAt: at },
        row: repo.thingRow(uow.sql, { ...t, claimGroupId: groupId }),
      }));
    // 5. and their certificates born with their rows (the machine's projection written at insert),
    //    pipelined behind the groups' writes and the things (same connection, in order)
    const [groups, things, certificates] = await Promise.allSettled([
      written,
      uow.createWithRows(thingKind, births, THING_IDENTITY),
      uow.createWithRows(deviceCertificateKind, accepted.map((i) => {
        const { certificate: c, thing } = claims[i];
        return {
          id: c.serial,
          input: { serial: c.serial, thingId: thing.id, issuedAt: at, notAfter: c.notAfter.toISOString(), renewal: false },
          row: { thing_id: thing.id, pem: c.pem, sealed_private_key: c.sealedKey, not_after: c.notAfter },
        };
      })),
    ]);
    if (groups.status === 'rejected') throw groups.reason;
    // a claim counted by its group but whose identity another group's batch enrolled meanwhile
    // (its certificate then fails too): roll back; retried alone, it finds that identity taken
    // and answers as a repeat
    if (things.status === 'fulfilled' && things.value.size !== accepted.length) throw new IdentityRace();
    if (things.status === 'rejected') throw things.reason;
    if (certificates.status === 'rejected') throw certificates.reason;
    for (const i of accepted) outcomes[i] = 'claimed';
    for (const [i, earlier] of duplicates) outcomes[i] = outcomes[earlier] === 'claimed' ? 'repeat' : outcomes[earlier];
    return outcomes;
  }
}

/**
 * The answer of a claim that failed in a transaction of its own: a domain error stays one; a value
 * the database refuses is the input's fault (4xx); anything else is a fault of ours (500).
 */
function settleAlone(member: { resolve(o: ClaimOutcome): void; reject(err: unknown): void }, err: unknown): void {
  if (err instanceof DomainError) return member.resolve(err);
  const pg = err as { code?: unknown; constraint_name?: unknown };
  if (typeof pg.code === 'string' && pg.code.startsWith('22')) return member.resolve(invalid('the claim holds a value the database cannot store'));
  if (pg.code === '23514') return member.resolve(unprocessable(`the claim breaks the database rule ${String(pg.constraint_name ?? 'check')}`));
  member.reject(err);
}
