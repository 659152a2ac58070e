-- Certificate rotation (issue 18, item 4): a renewed certificate waits for its first use (broker
-- CONNECT or the device-cert HTTP scheme); then the thing's other certificates are revoked.
alter table device_certificates add column awaiting_first_use boolean not null default false;
