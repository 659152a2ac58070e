import type { Db } from '../db/client.js';
import type { Services } from '../gateway.js';
import type { IamCache } from './cache.js';
import { iso } from '../lib/encoding.js';
import { notFound } from '../lib/errors.js';
import * as repo from './repo.js';

const assignmentKey = (realm: string, principalId: string, accountId: string) => `${realm}|${principalId}|${accountId}`;

function view(r: repo.AssignmentRow) {
  return { account_id: r.account_id, realm: r.realm, principal_id: r.principal_id, roles: r.roles, created_at: iso(r.created_at), updated_at: iso(r.updated_at), assigned_by: r.assigned_by };
}

/** Identity-center (idc-*) users reach accounts through assignments that platform admins manage. */
export class Assignments {
  constructor(
    private readonly sql: Db,
    private readonly cache: IamCache,
    private readonly accounts: Pick<Services['accounts'], 'require'>,
  ) {}

  /** The cached roles of an assignment, without loading (null: known to be unassigned). */
  peek(realm: string, principalId: string, accountId: string): string[] | null | undefined {
    return this.cache.peek<string[] | null>('assign', assignmentKey(realm, principalId, accountId));
  }

  /** The roles the user holds in the account, or null when not assigned. */
  roles(realm: string, principalId: string, accountId: string): Promise<string[] | null> {
    return this.cache.get('assign', assignmentKey(realm, principalId, accountId), async () => {
      const a = await repo.assignment(this.sql, realm, principalId, accountId);
      return a ? a.roles : null;
    });
  }

  async put(input: { accountId: string; realm: string; principalId: string; roles: string[] }, by: string) {
    await this.accounts.require(input.accountId);
    const { row, created } = await repo.upsertAssignment(this.sql, { ...input, roles: [...new Set(input.roles)].sort(), by });
    await this.cache.invalidate([`assign:${assignmentKey(input.realm, input.principalId, input.accountId)}`], { wait: true });
    return { assignment: view(row), created };
  }

  async list(accountId: string) {
    await this.accounts.require(accountId);
    return (await repo.listAssignments(this.sql, accountId)).map(view);
  }

  /** Its temporary credentials stop working at once (the SVC path reads the assignment's roles). */
  async delete(accountId: string, realm: string, principalId: string): Promise<void> {
    if (!(await repo.deleteAssignment(this.sql, accountId, realm, principalId))) {
      throw notFound(`no assignment of ${realm}/${principalId} to account ${accountId}`);
    }
    await this.cache.invalidate([`assign:${assignmentKey(realm, principalId, accountId)}`], { wait: true });
  }
}
