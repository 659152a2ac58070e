-- Architecture step 2 (issue 33): the claim group list reads a group's name, cap and TTL from its
-- row (the claimGroup actor's projection, src/trust/kinds.ts), no longer from actors.snapshot.
-- New rows take the defaults until the actor, created in the same transaction, projects its values.
alter table claim_groups
  add column name text not null default '',
  add column max_devices integer not null default 0,
  add column ttl_days integer not null default 0;
update claim_groups g
  set name = a.snapshot -> 'context' ->> 'name', max_devices = (a.snapshot -> 'context' ->> 'maxDevices')::int,
    ttl_days = (a.snapshot -> 'context' ->> 'ttlDays')::int
  from actors a where a.type = 'claimGroup' and a.id = g.id::text;
