-- Architecture step 2 (issue 33): every thing access code is an accessCode actor
-- (machines/accessCode.ts) whose machine decides its single use before expiry; the actor store
-- projects thing_access_codes.used_at and used_by_account. The actor id is a new uuid column (the
-- code's hash stays the lookup key). Codes issued before get their id and actor here.

create or replace function pg_temp.iso(t timestamptz) returns text language sql immutable
  as $$ select to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

alter table thing_access_codes add column id uuid;
update thing_access_codes set id = gen_random_uuid();
alter table thing_access_codes alter column id set not null;
alter table thing_access_codes add constraint thing_access_codes_id unique (id);

insert into actors (type, id, state, snapshot, version)
select 'accessCode', c.id::text, s.state,
  jsonb_build_object('status', case when s.state = 'used' then 'done' else 'active' end, 'value', s.state,
    'historyValue', '{}'::jsonb, 'children', '{}'::jsonb,
    'context', jsonb_strip_nulls(jsonb_build_object(
      'id', c.id, 'thingId', c.thing_id, 'issuedByAccount', c.issued_by_account, 'expiresAt', pg_temp.iso(c.expires_at),
      'usedAt', pg_temp.iso(c.used_at), 'usedByAccount', c.used_by_account))),
  1
from thing_access_codes c
  cross join lateral (select case when c.used_at is not null then 'used' else 'issued' end as state) s
where not exists (select 1 from actors a where a.type = 'accessCode' and a.id = c.id::text);
