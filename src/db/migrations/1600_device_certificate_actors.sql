-- Architecture step 2 (issue 33): every device certificate is a deviceCertificate actor (actor id =
-- its serial; machines/deviceCertificate.ts) whose machine decides revocation, a renewal's first
-- use and its supersession; the actor store projects device_certificates.revoked, revoked_at and
-- awaiting_first_use. Certificates issued before this migration get their actor here, in the state
-- their row shows (persisted XState snapshots): awaiting first use -> issued; revoked while their
-- thing is not -> superseded (a rotation); revoked with their thing -> revoked; otherwise inUse.

create or replace function pg_temp.iso(t timestamptz) returns text language sql immutable
  as $$ select to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

insert into actors (type, id, state, snapshot, version)
select 'deviceCertificate', c.serial, s.state,
  jsonb_build_object('status', case when c.revoked then 'done' else 'active' end, 'value', s.state,
    'historyValue', '{}'::jsonb, 'children', '{}'::jsonb,
    'context', jsonb_strip_nulls(jsonb_build_object(
      'serial', c.serial, 'thingId', c.thing_id, 'issuedAt', pg_temp.iso(c.created_at), 'notAfter', pg_temp.iso(c.not_after),
      -- a renewal: awaiting its first use, or issued after the thing's first certificate
      'renewal', c.awaiting_first_use or exists (
        select 1 from device_certificates o where o.thing_id = c.thing_id and o.created_at < c.created_at),
      'revokedAt', pg_temp.iso(c.revoked_at)))),
  1
from device_certificates c join things t on t.id = c.thing_id
  cross join lateral (select case
    when c.revoked and t.revoked_at is null then 'superseded'
    when c.revoked then 'revoked'
    when c.awaiting_first_use then 'issued'
    else 'inUse' end as state) s
where not exists (select 1 from actors a where a.type = 'deviceCertificate' and a.id = c.serial);
