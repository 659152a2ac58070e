import crypto from 'node:crypto';
import { z } from 'zod';
import type { Db } from '../db/client.js';
import { defineDomain } from '../gateway.js';
import { iso } from '../lib/encoding.js';
import { conflict, notFound, refused } from '../lib/errors.js';

export interface Account {
  id: string;
  name: string;
  created_at: string;
}

declare module '../gateway.js' {
  interface Services {
    accounts: AccountsService;
  }
}

/** Accounts: created by platform admins; in development mode also on first use of an acc-* token. */
export class AccountsService {
  /** accounts known to exist (they are never deleted), so the auth hot path skips the query */
  private readonly known = new Set<string>();

  constructor(private readonly sql: Db, private readonly autoCreate: boolean) {}

  async create(input: { id?: string; name: string; createdBy?: string }): Promise<Account> {
    const id = input.id ?? crypto.randomUUID();
    const [row] = await this.sql<Account[]>`
      insert into accounts (id, name, created_by) values (${id}, ${input.name}, ${input.createdBy ?? null})
      on conflict do nothing returning id, name, created_at`;
    if (!row) throw conflict(`account ${id} already exists`);
    this.known.add(id);
    return present(row);
  }

  async get(id: string): Promise<Account | undefined> {
    const [row] = await this.sql<Account[]>`select id, name, created_at from accounts where id = ${id}`;
    return row && present(row);
  }

  async require(id: string): Promise<Account> {
    const account = await this.get(id);
    if (!account) throw notFound(`account ${id} not found`);
    return account;
  }

  async list(limit: number, after?: string): Promise<{ items: Account[]; next_cursor: string | null }> {
    const rows = await this.sql<Account[]>`
      select id, name, created_at from accounts
      where ${after ? this.sql`id > ${after}` : this.sql`true`}
      order by id limit ${limit + 1}`;
    const items = rows.slice(0, limit).map(present);
    return { items, next_cursor: rows.length > limit ? items[items.length - 1].id : null };
  }

  /** Called for every acc-* principal: the account must exist (created on first use in dev mode). */
  async ensureExists(id: string): Promise<void> {
    if (this.known.has(id)) return;
    const [row] = await this.sql`select 1 from accounts where id = ${id}`;
    if (!row) {
      if (!this.autoCreate) throw refused(`account ${id} does not exist; a platform admin creates accounts`);
      await this.sql`insert into accounts (id, name, created_by) values (${id}, ${'acc-' + id}, 'dev-issuer') on conflict do nothing`;
    }
    this.known.add(id);
  }
}

function present(row: Account & { created_at: unknown }): Account {
  return { id: row.id, name: row.name, created_at: iso(row.created_at as string) };
}

const accountSchema = z.object({ id: z.uuid(), name: z.string(), created_at: z.string() });

export const accountsDomain = defineDomain({
  name: 'accounts',
  provides: ['accounts'],
  init(gw) {
    const accounts = new AccountsService(gw.sql, gw.config.DEV_ISSUER);
    gw.auth.addResolver(async (principal) => {
      if (principal.realmKind === 'acc' && principal.accountId) await accounts.ensureExists(principal.accountId);
      return principal;
    });
    return { accounts };
  },
  async routes(app, _gw, { accounts }) {
    const read = { action: 'platform:Account:Read', roles: ['platform-admin', 'platform-operator'] };
    app.post('/platform/v1/accounts', {
      config: { auth: { action: 'platform:Account:Create', roles: ['platform-admin'] } },
      schema: {
        tags: ['platform'], summary: 'Create an account',
        body: z.strictObject({ name: z.string().trim().min(1).max(200), id: z.uuid().optional() }),
        response: { 201: accountSchema },
      },
    }, async (request, reply) => {
      const account = await accounts.create({ ...request.body, createdBy: request.principal!.sub });
      return reply.code(201).send(account);
    });
    app.get('/platform/v1/accounts', {
      config: { auth: read },
      schema: {
        tags: ['platform'], summary: 'List accounts (keyset pagination by id)',
        querystring: z.strictObject({ limit: z.coerce.number().int().min(1).max(100).default(20), after: z.uuid().optional() }),
        response: { 200: z.object({ items: z.array(accountSchema), next_cursor: z.string().nullable() }) },
      },
    }, async (request) => accounts.list(request.query.limit, request.query.after));
    app.get('/platform/v1/accounts/:accountId', {
      config: { auth: read },
      schema: { tags: ['platform'], summary: 'Read an account', params: z.object({ accountId: z.uuid() }), response: { 200: accountSchema } },
    }, async (request) => accounts.require(request.params.accountId));
  },
});
