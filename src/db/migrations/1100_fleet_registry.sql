-- Fleet registry (issue 18, item 1): tags on things, and the indexes of GET /api/v1/things.
-- The list pages by keyset on (sort key, id) inside one account, so each sort and filter has an
-- index that starts with account_id and ends with (created_at, id).

create table thing_tags (
  thing_id uuid not null references things (id),
  tag text not null check (tag ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$'),
  created_at timestamptz not null default now(),
  primary key (thing_id, tag)
);
-- ?tags=: the things carrying a tag
create index thing_tags_tag on thing_tags (tag, thing_id);

-- sort=created_at (and the default page) within an account
create index things_account_created on things (account_id, created_at, id);
-- ?state=
create index things_account_state_created on things (account_id, lifecycle_state, created_at, id);
-- ?model= (by id; by vid:pid descriptor things_model_serial leads with (account_id, model))
create index things_account_model_created on things (account_id, model_id, created_at, id);
-- ?claim_group=
create index things_account_claim_group on things (account_id, claim_group_id, created_at, id) where claim_group_id is not null;
-- ?revoked=true
create index things_account_revoked_created on things (account_id, created_at, id) where revoked_at is not null;
-- GET /api/v1/things/claim-groups: keyset by id within an account
create index claim_groups_account_id on claim_groups (account_id, id);
