-- Fleet search (GET /api/v1/things?q=): a prefix of the serial (case-insensitive) or of the thing
-- id. Each is a range scan on its own index within the account (text_pattern_ops: LIKE 'abc%'
-- uses the index whatever the database's collation); the two combine as a BitmapOr.
create index things_account_serial_prefix on things (account_id, lower(serial) text_pattern_ops);
create index things_account_id_prefix on things (account_id, (id::text) text_pattern_ops);
