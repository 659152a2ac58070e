-- Telemetry history: every telemetry message of every thing (one row a message, its values as the
-- device sent them), range-partitioned by day on `at` (native declarative partitioning).
-- Partitions are created ahead and dropped after TELEMETRY_RETENTION_DAYS by the broker's
-- `telemetry.partitions` job: dropping a day is a metadata operation, with no delete and no vacuum.
-- One row a message rather than one a key: a third of the rows and index entries for the usual
-- few-key message, which is what keeps the batched write close to the latest-values-only rate.
create table telemetry_history (
  thing_id text not null,
  at timestamptz not null,
  telemetry jsonb not null
) partition by range (at);

-- the query path: one thing, a time range (the key is picked from `telemetry`)
create index telemetry_history_thing_at on telemetry_history (thing_id, at);

-- Daily (UTC) partitions from `first_day` for `days` days (idempotent; the name carries the day).
create function telemetry_history_ensure_partitions(first_day date, days integer) returns void
language plpgsql as $$
declare
  d date;
begin
  for i in 0 .. days - 1 loop
    d := first_day + i;
    execute format('create table if not exists %I partition of telemetry_history for values from (%L) to (%L)',
      'telemetry_history_p' || to_char(d, 'YYYYMMDD'), d::timestamp at time zone 'UTC', (d + 1)::timestamp at time zone 'UTC');
  end loop;
end $$;

-- partitions written right after migrating, before the job's first run
select telemetry_history_ensure_partitions((now() at time zone 'UTC')::date - 1, 4);
