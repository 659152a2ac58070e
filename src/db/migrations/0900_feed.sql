-- State-change feed, subscriptions and webhook delivery (issue 15).

-- The transaction that wrote each domain event. seq (bigserial) values are taken before commit,
-- so they can commit out of order: a reader that pages by seq alone could pass seq 10 while
-- seq 9 is still uncommitted, and never see it. The feed pages by (xid, seq) and serves only
-- events whose transaction is below pg_snapshot_xmin(pg_current_snapshot()): every transaction
-- there has ended, so no event can ever appear behind the cursor (docs/decisions.md).
-- Rows written before this migration take the migration's own xid (all committed long ago).
alter table domain_events add column xid xid8 not null default pg_current_xact_id();

-- the feed of one account (and the dispatcher's walk over it): the only index this adds to the
-- write path of a state change
create index domain_events_feed on domain_events (account_id, xid, seq)
  where actor_type = 'thing' and type in ('thing.stateChanged', 'thing.enrolled');

-- State-change subscriptions. status and consecutive_failures, suspended_at and
-- suspended_reason are the projection of the subscription actor (written by the actor store only).
create table state_change_subscriptions (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  -- set when a registrar-bound factory service created it: its deliveries are that registrar's changes
  registrar_id uuid,
  target_url text not null,
  -- the filter as given (null: every change); new_states / thing_ids are its query form
  event_filter jsonb,
  new_states text[],
  thing_ids uuid[],
  -- AES-256-GCM sealed: every delivery recomputes an HMAC with it, so it cannot be a hash
  secret_sealed bytea not null,
  status text not null default 'ACTIVE' check (status in ('ACTIVE', 'SUSPENDED', 'DELETED')),
  consecutive_failures integer not null default 0,
  suspended_at timestamptz,
  suspended_reason text,
  created_by text not null,
  created_at timestamptz not null,
  updated_at timestamptz not null
);
create index state_change_subscriptions_account on state_change_subscriptions (account_id, id);
create index state_change_subscriptions_active on state_change_subscriptions (account_id) where status = 'ACTIVE';

-- How far the dispatcher has turned each account's log into deliveries. A row is set to the
-- end of the log when the account's first ACTIVE subscription appears (created or reactivated);
-- the dispatcher reads only accounts with an ACTIVE subscription, and the node that dispatches an
-- account locks its row (the others skip it).
create table feed_dispatch_cursors (
  account_id uuid primary key references accounts (id),
  xid xid8 not null,
  seq bigint not null,
  updated_at timestamptz not null default now()
);

-- Pending webhook deliveries: a durable queue (any node claims due rows with a lease; a crash
-- lets the lease lapse and another node retries). A row goes when delivered or dropped.
create table webhook_deliveries (
  id uuid primary key,
  subscription_id uuid not null references state_change_subscriptions (id) on delete cascade,
  event_seq bigint not null,
  -- the exact body, the same on every attempt (the signature covers it)
  body text not null,
  attempts integer not null default 0,
  next_attempt_at timestamptz not null default now(),
  lease_until timestamptz,
  last_status integer,
  last_error text,
  created_at timestamptz not null default now(),
  -- one delivery per change and subscription, however often the dispatch runs
  unique (subscription_id, event_seq)
);
create index webhook_deliveries_due on webhook_deliveries (next_attempt_at);
