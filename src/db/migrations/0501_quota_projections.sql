-- Lifecycle columns become projections of the actors (the actor store writes them; DESIGN.md section 4).

-- quota_requests: status, decided_at, decided_by, decision_reason are the quotaRequest actor's projection;
-- a new row starts as its machine does.
alter table quota_requests alter column status set default 'pending';

-- The organizationLeave actor's own row: its state and finish time, projected by the store.
-- A membership is 'leaving' while its account has an unfinished leave (derived in queries), so
-- organization_members no longer stores status and leave_id.
create table organization_leaves (
  id uuid primary key,
  organization_id uuid not null references organizations (id),
  account_id uuid not null references accounts (id),
  state text not null default 'started',
  started_at timestamptz not null,
  finished_at timestamptz
);
-- at most one unfinished leave per account (the service checks first and answers 409)
create unique index organization_leaves_unfinished on organization_leaves (account_id) where finished_at is null;
create index organization_leaves_steps on organization_leaves (state) where finished_at is null;

-- leaves started before this migration
insert into organization_leaves (id, organization_id, account_id, state, started_at, finished_at)
select a.id::uuid, (a.snapshot #>> '{context,organizationId}')::uuid, (a.snapshot #>> '{context,accountId}')::uuid, a.state,
  (a.snapshot #>> '{context,startedAt}')::timestamptz, (a.snapshot #>> '{context,finishedAt}')::timestamptz
from actors a where a.type = 'organizationLeave';

alter table organization_members drop column status, drop column leave_id;
