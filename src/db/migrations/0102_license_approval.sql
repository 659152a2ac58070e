-- Tenant license approval (capability approve_licenses). A model decides whether a device's license
-- request is granted at once ('automatic', as before) or waits for a tenant's decision ('manual').
-- A typed column rather than a key in models.provisioning: that JSON holds the provisioning method's
-- settings and is validated and shown per method.
alter table models add column license_approval text not null default 'automatic'
  check (license_approval in ('automatic', 'manual'));

-- A request waiting for approval is a 'pending' decision row; approving or denying updates it once.
alter table device_licenses drop constraint device_licenses_decision_check;
alter table device_licenses add constraint device_licenses_decision_check check (decision in ('pending', 'granted', 'denied'));
-- what the device asked for: approval signs these later (and GET re-signs the same license)
alter table device_licenses add column features jsonb not null default '[]';
-- who decided (principal sub; null for automatic decisions) and when (the license's iat)
alter table device_licenses add column decided_by text;
alter table device_licenses add column decided_at timestamptz;
-- at most one pending request per thing: concurrent requests converge on the same row
create unique index device_licenses_one_pending on device_licenses (thing_id) where decision = 'pending';
