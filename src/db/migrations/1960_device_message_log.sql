-- Twin reports and command replies as rule sources of the data bridges (issue 34): the broker keeps
-- each message a device publishes on devices/{id}/twin/reported and devices/{id}/commands/response
-- as a row of a durable log, written in the statement that stores the reported state, or when the
-- node holding the device's connection takes the reply. A rule reads its account's rows of one kind
-- in (tx, seq) order below pg_snapshot_xmin(pg_current_snapshot()), as it reads telemetry_history
-- (migration 1800): no row commits behind a position. Rows past TELEMETRY_RETENTION_DAYS are deleted.
create table device_message_log (
  seq bigint generated always as identity,
  tx xid8 not null default pg_current_xact_id(),
  account_id uuid not null,
  thing_id text not null,
  kind text not null check (kind in ('twin', 'commandReply')),
  -- the JSON as written: a reply's bytes as the device sent them, a twin report as stored
  payload json not null,
  -- a reply's MQTT 5 correlation data (the command id), when it came with one
  correlation text,
  at timestamptz not null default now()
);
create index device_message_log_read on device_message_log (account_id, kind, tx, seq);
create index device_message_log_at on device_message_log (at);

alter table bridge_rules drop constraint bridge_rules_source_check;
alter table bridge_rules add constraint bridge_rules_source_check check (source in ('telemetry', 'connectivity', 'state', 'twin', 'commandReply'));
