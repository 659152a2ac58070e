-- Telemetry history: every telemetry message of every thing, range-partitioned by day (native
-- declarative partitioning). Partitions are created ahead and dropped after
-- TELEMETRY_RETENTION_DAYS by the broker's `telemetry.partitions` job: dropping a day is a
-- metadata operation, with no delete and no vacuum.
-- One row per thing per ingest batch (every 250 ms), holding that thing's messages of the batch
-- in arrival order as `[[epoch ms, {values}], ...]`: a row and an index entry per batch instead of
-- per message keeps the history write close to the cost of the latest values alone (measured by
-- bench:telemetry). `json`, not `jsonb`: checked, stored as sent, not re-encoded on the write path.
create table telemetry_history (
  thing_id text collate "C" not null,
  first_at timestamptz not null,
  last_at timestamptz not null,
  points json not null
) partition by range (first_at);

-- lz4 (several times cheaper than the default pglz on the write path) where the server has it;
-- partitions created later take it from here
do $$ begin
  alter table telemetry_history alter column points set compression lz4;
exception when feature_not_supported then null;
end $$;

-- the query path: one thing, the rows whose messages reach into the range
create index telemetry_history_thing_last_at on telemetry_history (thing_id, last_at);

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
