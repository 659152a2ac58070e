-- Factory surface, part 1 (issue 13): PROVISION saga runs. One row per run; state, finished_at
-- and error are the projection of the provisioningRun actor (written by the actor store only);
-- the legs are read from the actor's snapshot. A thing has at most one RUNNING run.
create table provisioning_runs (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  thing_id uuid not null references things (id) on delete cascade,
  model_id uuid not null references models (id),
  started_by text not null,
  created_at timestamptz not null,
  state text not null default 'RUNNING' check (state in ('RUNNING', 'SUCCEEDED', 'FAILED')),
  error text,
  finished_at timestamptz
);
create index provisioning_runs_account on provisioning_runs (account_id, id);
create index provisioning_runs_thing on provisioning_runs (thing_id, created_at);
create unique index provisioning_runs_one_running on provisioning_runs (thing_id) where state = 'RUNNING';
-- the sweep's scan: runs still going
create index provisioning_runs_running on provisioning_runs (created_at) where state = 'RUNNING';
