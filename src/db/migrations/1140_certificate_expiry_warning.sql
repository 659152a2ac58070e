-- Certificate expiry warning (issue 18, item 4): when the account was told that this certificate
-- expires soon (the sweep's durable dedupe: each certificate is warned of once).
alter table device_certificates add column expiry_warned_at timestamptz;

-- the sweep reads the valid certificates not yet warned of, by expiry
create index device_certificates_expiry on device_certificates (not_after) where not revoked and expiry_warned_at is null;
