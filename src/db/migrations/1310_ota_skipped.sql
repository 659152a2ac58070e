-- Issue 37 item 8: an action whose thing is revoked during its rollout ends `skipped` (final; a
-- group's thresholds count over the targets not skipped), and each group projects its count.
alter table ota_actions drop constraint ota_actions_status_check;
alter table ota_actions add constraint ota_actions_status_check
  check (status in ('scheduled', 'pending', 'delivered', 'downloading', 'installing', 'succeeded', 'failed', 'skipped', 'cancelled'));
alter table ota_rollout_groups add column skipped integer not null default 0; -- projection
-- a revoked thing's actions not ended, scheduled ones included (the partial index held only open ones)
drop index ota_actions_thing;
create index ota_actions_thing on ota_actions (thing_id);
