-- the broker's nodes reload the (few) certificates awaiting their first use every minute (src/trust/firstUse.ts)
create index device_certificates_awaiting_first_use on device_certificates (serial) where awaiting_first_use and not revoked;
