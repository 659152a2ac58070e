-- OTA rollouts (issue 20 items 2 and 3). Target filters are plain rows (named queries over an
-- account's things). A rollout and each of its groups are actors (machines/rollout.ts,
-- machines/rolloutGroup.ts): the columns marked "projection" are written by the actor store only.
-- Per-device actions are plain rows updated in bulk (high volume, no lifecycle machine).
create table ota_target_filters (
  id uuid primary key,
  account_id uuid not null references accounts (id) on delete cascade,
  name text not null,
  query jsonb not null, -- { model, state, tags, last_seen_before, last_seen_after }
  created_at timestamptz not null,
  updated_at timestamptz not null,
  unique (account_id, name)
);

create table ota_rollouts (
  id uuid primary key,
  account_id uuid not null references accounts (id) on delete cascade,
  name text not null,
  -- the filter it was created from (kept as it was then in `query`; the filter may change or go)
  filter_id uuid references ota_target_filters (id) on delete set null,
  query jsonb not null,
  version text not null,
  artifact_url text not null,
  sha256 text not null,
  size bigint not null,
  success_threshold integer not null check (success_threshold between 1 and 100),
  error_threshold integer not null check (error_threshold between 0 and 100),
  total_targets integer not null,
  group_count integer not null,
  created_at timestamptz not null,
  state text not null default 'READY', -- projection
  current_group integer not null default -1, -- projection
  started_at timestamptz, -- projection
  ended_at timestamptz -- projection
);
create index ota_rollouts_account on ota_rollouts (account_id, created_at desc, id desc);

create table ota_rollout_groups (
  id uuid primary key,
  rollout_id uuid not null references ota_rollouts (id) on delete cascade,
  index integer not null,
  total integer not null,
  state text not null default 'SCHEDULED', -- projection
  succeeded integer not null default 0, -- projection
  failed integer not null default 0, -- projection
  started_at timestamptz, -- projection
  ended_at timestamptz, -- projection
  unique (rollout_id, index)
);

-- status: scheduled (group not started) -> pending (group started, sent to the device when it listens)
-- -> delivered (the device said it got it) -> downloading -> installing -> succeeded | failed;
-- scheduled or pending -> cancelled (rollout stopped or cancelled). Reports only move forward.
create table ota_actions (
  id uuid primary key,
  rollout_id uuid not null references ota_rollouts (id) on delete cascade,
  group_id uuid not null references ota_rollout_groups (id) on delete cascade,
  thing_id uuid not null,
  status text not null default 'scheduled'
    check (status in ('scheduled', 'pending', 'delivered', 'downloading', 'installing', 'succeeded', 'failed', 'cancelled')),
  progress integer check (progress between 0 and 100),
  reason text,
  sent_at timestamptz, -- last publish to the device (the resend sweep reads it)
  updated_at timestamptz not null,
  unique (rollout_id, thing_id)
);
-- a device's open actions (delivery when it subscribes)
create index ota_actions_thing on ota_actions (thing_id) where status in ('pending', 'delivered', 'downloading', 'installing');
-- a group's tally and its pending actions
create index ota_actions_group on ota_actions (group_id, status);
