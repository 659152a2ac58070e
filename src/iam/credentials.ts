import crypto from 'node:crypto';
import type { ActorKind, ActorStore } from '../actors/store.js';
import type { Db } from '../db/client.js';
import type { Logger } from '../log.js';
import type { Clock } from '../lib/clock.js';
import { iso, sha256 } from '../lib/encoding.js';
import { conflict, notFound } from '../lib/errors.js';
import { staticCredentialMachine } from '../../machines/staticCredential.js';
import type { IamCache } from './cache.js';
import { newAccessKeyId, newSecretKey } from './keys.js';
import type { LastUsed } from './lastUsed.js';
import * as repo from './repo.js';
import { STATIC_PREFIX } from './schemas.js';

/** The machine decides ACTIVE <-> INACTIVE -> deleted; the store projects its state onto `status`. */
export const staticCredentialKind: ActorKind<typeof staticCredentialMachine> = {
  type: 'staticCredential',
  machine: staticCredentialMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'iam_credentials',
    columns: ['status'],
    // `deleted` has no status: the row is deleted in the same transaction
    project: (_snapshot, state) => ({ status: state === 'deleted' ? null : state }),
  },
};

export const MAX_STATIC_PER_USER = 2;

export interface StaticCredentialView {
  id: string;
  access_key_id: string;
  status: 'ACTIVE' | 'INACTIVE';
  principal_id: string;
  description: string;
  created_at: string;
  expires_at: string | null;
  last_used_at: string | null;
}

function view(r: repo.CredentialRow): StaticCredentialView {
  return {
    id: r.id, access_key_id: r.access_key_id, status: r.status as 'ACTIVE' | 'INACTIVE', principal_id: r.principal_id,
    description: r.description, created_at: iso(r.created_at), expires_at: iso(r.expires_at), last_used_at: iso(r.last_used_at),
  };
}

/** Static (AKSV) access keys of tenant IAM users: at most two per user per account. */
export class StaticCredentials {
  constructor(
    private readonly sql: Db,
    private readonly actors: ActorStore,
    private readonly clock: Clock,
    private readonly cache: Pick<IamCache, 'invalidate'>,
    private readonly lastUsed: Pick<LastUsed, 'flush'>,
    private readonly log: Logger,
  ) {}

  async create(accountId: string, input: { principal_id: string; description?: string }, by: string): Promise<StaticCredentialView & { secret_key: string }> {
    const id = crypto.randomUUID();
    const accessKeyId = newAccessKeyId(STATIC_PREFIX);
    const secret = newSecretKey();
    const createdAt = this.clock.now().toISOString();
    const row = await this.actors.run(async (uow) => {
      await repo.lockPrincipal(uow.sql, accountId, input.principal_id);
      const n = await repo.countStatic(uow.sql, accountId, input.principal_id);
      if (n >= MAX_STATIC_PER_USER) {
        throw conflict(`user ${input.principal_id} already has ${n} static credentials in account ${accountId}; the limit is ${MAX_STATIC_PER_USER} per IAM user per account (delete one first)`, {
          type: 'credential-limit', extra: { limit: MAX_STATIC_PER_USER },
        });
      }
      // the row first, then the actor, which projects its initial state onto it
      await repo.insertCredential(uow.sql, {
        id, account_id: accountId, access_key_id: accessKeyId, kind: 'static', secret_hash: sha256(secret), session_token_hash: null,
        principal_id: input.principal_id, principal_type: 'user', realm: `acc-${accountId}`,
        description: input.description ?? '', created_at: createdAt, expires_at: null,
      });
      await uow.create(staticCredentialKind, id, { id, accountId, accessKeyId, principalId: input.principal_id, createdAt });
      return (await repo.staticCredential(uow.sql, accountId, id))!;
    });
    this.log.info({ accountId, credentialId: id, accessKeyId, by }, 'iam: static credential created');
    return { ...view(row), secret_key: secret };
  }

  async list(accountId: string, principalId?: string): Promise<StaticCredentialView[]> {
    await this.lastUsed.flush();
    return (await repo.listStatic(this.sql, accountId, principalId)).map(view);
  }

  async get(accountId: string, id: string): Promise<StaticCredentialView> {
    await this.lastUsed.flush();
    return view(await this.require(this.sql, accountId, id));
  }

  /** PUT: the machine takes ACTIVATE/DEACTIVATE (a credential already in that state stays so); the description is plain data. */
  async update(accountId: string, id: string, input: { status: 'ACTIVE' | 'INACTIVE'; description?: string }, by: string): Promise<StaticCredentialView> {
    const at = this.clock.now().toISOString();
    const { row, changed } = await this.actors.run(async (uow) => {
      await this.require(uow.sql, accountId, id, true);
      const event = input.status === 'INACTIVE' ? { type: 'DEACTIVATE' as const, at, by } : { type: 'ACTIVATE' as const, at, by };
      const result = await uow.trySend(staticCredentialKind, id, event);
      if ('refused' in result && result.state !== input.status) {
        throw conflict(`credential ${id} is ${result.state}; it cannot become ${input.status}`, { extra: { state: result.state } });
      }
      return { row: await repo.describeStatic(uow.sql, id, input.description), changed: !('refused' in result) };
    });
    if (changed) await this.cache.invalidate([`cred:${row.access_key_id}`], { wait: true });
    return view(row);
  }

  /** Removed: the machine ends in `deleted`, the row (and its hash) is gone. */
  async delete(accountId: string, id: string, by: string): Promise<void> {
    const at = this.clock.now().toISOString();
    const row = await this.actors.run(async (uow) => {
      const current = await this.require(uow.sql, accountId, id, true);
      await uow.send(staticCredentialKind, id, { type: 'DELETE', at, by });
      await repo.deleteCredential(uow.sql, id);
      return current;
    });
    await this.cache.invalidate([`cred:${row.access_key_id}`], { wait: true });
  }

  /** The credential of this account (other accounts' are 404 too). */
  private async require(db: Db, accountId: string, id: string, lock = false): Promise<repo.CredentialRow> {
    const row = await repo.staticCredential(db, accountId, id, lock);
    if (!row) throw notFound(`credential ${id} not found in account ${accountId}`);
    return row;
  }
}
