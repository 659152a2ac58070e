-- Identity blacklist (issue 16): the active entries, the change log edges replay as deltas, and
-- the latest signed snapshot every node serves.

-- Active entries. `model` is what things carry in things.model: the `VID:PID` descriptor of a
-- registered model, or the name a device sent for an unregistered one. A removal deletes the row;
-- the change log keeps the history.
create table blacklist_entries (
  model text not null,
  sn text not null,
  reason text not null,
  added_by text not null,
  added_at timestamptz not null,
  -- the account that owned the model when the entry was added (null: no registered model)
  owner_account_id uuid,
  primary key (model, sn)
);
-- check?sn= looks a serial up across models
create index blacklist_entries_sn on blacklist_entries (sn);

-- Every add and remove, in commit order: writers take an advisory lock before they draw `seq`
-- and hold it until commit, so a reader never sees seq N+1 without N (deltas skip nothing).
create table blacklist_changes (
  seq bigserial primary key,
  op text not null check (op in ('add', 'remove')),
  model text not null,
  sn text not null,
  -- the entry's reason (adds only)
  reason text,
  by text not null,
  at timestamptz not null,
  -- adds: false until the enforcement sweep ran 2.5 minutes or more after the add (SETTLE_AFTER_MS)
  settled boolean not null default true
);
create index blacklist_changes_at on blacklist_changes (at);
create index blacklist_changes_unsettled on blacklist_changes (seq) where not settled;

-- How far pruning went: a cursor below `pruned_through` lost changes (410).
create table blacklist_log (
  id boolean primary key default true check (id),
  pruned_through bigint not null default 0
);
insert into blacklist_log (id) values (true);

-- The latest signed snapshot (one row), rebuilt on change; every node serves this one.
create table blacklist_snapshot (
  id boolean primary key default true check (id),
  seq bigint not null,
  kid text not null,
  entries integer not null,
  -- the flattened JWS JSON serialization served as application/jose+json
  jws text not null,
  built_at timestamptz not null
);

-- Adding an entry revokes the enrolled things of that (model, serial) in every account.
create index if not exists things_model_serial on things (model, serial);
