-- Architecture step 2 (issue 33, item 2): the broker publishes a thing's connectivity, twin versions
-- and latest telemetry as views (test/architectureRules.ts, PUBLISHED_READ_MODELS) for trust's fleet
-- registry, which reads these, never the tables. One view per table, so that the registry's list
-- joins only the connectivity, as before (a view inlines into the query: same plan).

create view device_status as
  select thing_id, connected, connected_at, disconnected_at, last_seen, protocol_version
  from device_connectivity;

create view device_twin_versions as
  select thing_id, reported_version, reported_at, desired_version, desired_at
  from device_twins;

create view device_latest_telemetry as
  select thing_id, telemetry, updated_at
  from device_telemetry_latest;
