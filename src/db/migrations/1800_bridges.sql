-- Data bridges (issue 34): sinks (NATS JetStream, RabbitMQ), rules routing device data and events
-- to them, and each rule's durable position over the logs the gateway already keeps.

-- The transaction that wrote each telemetry history row, as domain_events.xid (migration 0900): a
-- rule reads rows in (tx, thing_id) order, only below pg_snapshot_xmin(pg_current_snapshot()), so
-- a row can never commit behind a rule's position. Added without a default first, then given
-- one: no rewrite of the existing partitions (their rows keep a null tx: written before any rule).
alter table telemetry_history add column tx xid8;
alter table telemetry_history alter column tx set default pg_current_xact_id();
create index telemetry_history_tx on telemetry_history (tx, thing_id);

-- a rule's walk over its account's connectivity and state-change events
create index domain_events_bridges on domain_events (account_id, xid, seq)
  where type in ('device.connected', 'device.disconnected', 'thing.stateChanged', 'thing.enrolled');

create table bridges (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  name text not null,
  type text not null check (type in ('nats', 'amqp')),
  -- the URL without its credentials (what is shown)
  url text not null,
  -- AES-256-GCM sealed JSON { url, username?, password?, token? }: the client needs them in clear
  secret_sealed bytea not null,
  subject_prefix text not null,
  -- amqp: the exchange published to
  exchange text,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  unique (account_id, name)
);

-- status, failing_since, last_error and last_error_at are the projection of the bridgeRule actor.
create table bridge_rules (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  bridge_id uuid not null references bridges (id),
  name text not null,
  from_filter text not null,
  -- what `from` reads: telemetry (history), connectivity or state (domain events)
  source text not null check (source in ('telemetry', 'connectivity', 'state')),
  where_expr jsonb,
  select_fields text[],
  status text not null default 'ENABLED',
  failing_since timestamptz,
  last_error text,
  last_error_at timestamptz,
  -- the durable position: everything at or before it was acknowledged by the sink.
  -- telemetry: (pos_xid, pos_thing) over telemetry_history (tx, thing_id), pos_thing null = the
  -- whole transaction; events: (pos_xid, pos_seq) over domain_events (xid, seq)
  pos_xid xid8 not null,
  pos_thing text collate "C",
  pos_seq bigint,
  delivered bigint not null default 0,
  failed bigint not null default 0,
  last_delivered_at timestamptz,
  -- the node delivering it (one at a time in a cluster), until lease_until
  lease_node text,
  lease_until timestamptz,
  created_by text not null,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  unique (account_id, name)
);
create index bridge_rules_bridge on bridge_rules (bridge_id);
