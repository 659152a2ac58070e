-- The number of messages a history row holds (its points array's length), written by the ingest
-- with the row: a data bridge rule's lag in messages (TelemetryLog.behind, every 2 s per rule) summed
-- json_array_length over up to 2,000 rows, parsing every point's JSON again (about as much
-- PostgreSQL CPU as the rule's reads themselves). Rows written before this column stay null and are
-- counted the old way.
alter table telemetry_history add column messages integer;
