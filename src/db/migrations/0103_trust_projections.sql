-- Architecture step (issue 11): lifecycle columns are projections of the actors' snapshots, written
-- by the actor store in the same transaction; queries read them instead of actors.snapshot.

-- Claim groups: the claimGroup machine's state, consumed count and expiry (the claim query and the
-- TTL sweep read them). New rows take the defaults until the actor, created in the same
-- transaction, projects its values.
alter table claim_groups
  add column state text not null default 'active' check (state in ('active', 'capped', 'expired', 'revoked')),
  add column consumed integer not null default 0,
  add column expires_at timestamptz;
update claim_groups g
  set state = a.state, consumed = (a.snapshot -> 'context' ->> 'consumed')::int, expires_at = (a.snapshot -> 'context' ->> 'expiresAt')::timestamptz
  from actors a where a.type = 'claimGroup' and a.id = g.id::text;
-- the TTL sweep: groups that may still expire
create index claim_groups_due on claim_groups (expires_at) where state in ('active', 'capped');

-- Enrollment tokens become enrollmentToken actors (id = the thing's id) projecting
-- things.enrollment_token_expires_at and enrollment_token_used_at. Tokens issued before get theirs
-- here, in the snapshot shape XState persists (a used token is in its final state: status done).
insert into actors (type, id, state, snapshot)
select 'enrollmentToken', t.id::text, s.state,
  jsonb_build_object(
    'status', case when s.state = 'used' then 'done' else 'active' end,
    'value', s.state, 'historyValue', '{}'::jsonb, 'children', '{}'::jsonb,
    'context', jsonb_build_object(
      'thingId', t.id, 'accountId', t.account_id,
      'issuedAt', to_char(t.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
      'expiresAt', to_char(t.enrollment_token_expires_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
      'usedAt', to_char(t.enrollment_token_used_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
from things t
  cross join lateral (select case when t.enrollment_token_used_at is not null then 'used' else 'issued' end as state) s
where t.enrollment_token_hash is not null and t.enrollment_token_expires_at is not null
on conflict do nothing;
