-- Every thing and every license decision is an actor (machines/thing.ts, machines/license.ts):
-- its machine decides revocation, transfer and license decisions, and the actor store projects
-- things.account_id/revoked_at and device_licenses.decision/decided_*/expires_at/reason.
-- Things registered for the token flow but not enrolled yet, and licenses decided before this
-- migration, had no actor: create them here from their rows (persisted XState snapshots).

create function pg_temp.iso(t timestamptz) returns text language sql immutable
  as $$ select to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

insert into actors (type, id, state, snapshot, version)
select 'thing', t.id::text, s.state,
  jsonb_build_object('status', 'active', 'value', s.state, 'historyValue', '{}'::jsonb, 'children', '{}'::jsonb,
    'context', jsonb_strip_nulls(jsonb_build_object(
      'id', t.id, 'accountId', t.account_id, 'manufacturer', t.manufacturer, 'model', t.model, 'serial', t.serial,
      'enrolledBy', t.enrolled_by, 'enrolledAt', pg_temp.iso(t.enrolled_at), 'revokedAt', pg_temp.iso(t.revoked_at)))),
  1
from things t
  cross join lateral (select case when t.enrolled_by is null then 'REGISTERED' else 'ROLLEDOFF' end as state) s
where not exists (select 1 from actors a where a.type = 'thing' and a.id = t.id::text);

insert into actors (type, id, state, snapshot, version)
select 'license', l.id::text, l.decision,
  jsonb_build_object('status', case when l.decision = 'denied' then 'done' else 'active' end, 'value', l.decision,
    'historyValue', '{}'::jsonb, 'children', '{}'::jsonb,
    'context', jsonb_strip_nulls(jsonb_build_object(
      'id', l.id, 'thingId', l.thing_id, 'accountId', t.account_id, 'serial', t.serial, 'kind', l.kind, 'features', l.features,
      'requestedAt', pg_temp.iso(l.created_at), 'decidedAt', pg_temp.iso(l.decided_at), 'decidedBy', l.decided_by,
      'expiresAt', pg_temp.iso(l.expires_at), 'reason', l.reason))),
  1
from device_licenses l join things t on t.id = l.thing_id
where not exists (select 1 from actors a where a.type = 'license' and a.id = l.id::text);
