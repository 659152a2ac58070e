-- Architecture step 2 (issue 33, item 2): each module owns its tables. Trust publishes what other
-- modules may read of things and models as views (test/architectureRules.ts, PUBLISHED_READ_MODELS);
-- they read these, never the tables, and never write them. A view inlines into the reader's query:
-- a join on it plans as the join on the table did (same indexes). Adding a column is a later
-- migration's `create or replace view`.

-- a thing as the feed, OTA and the registry join it: identity, model, owner, lifecycle, enrollment, revocation
create view thing_directory as
  select id, account_id, model_id, manufacturer, model, serial, lifecycle_state, lifecycle_updated_at,
    enrolled_at, revoked_at, created_at
  from things;

-- a model as the blacklist, the registry and the factory name it: owner and VID:PID
create view model_directory as
  select id, account_id, vid, pid, internal
  from models;
