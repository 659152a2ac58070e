-- Architecture step 2 (issue 33, item 2): the factory publishes which models its services bind to
-- which registrar (test/architectureRules.ts, PUBLISHED_READ_MODELS): the feed's registrar scope
-- reads this view, never the table (a view inlines into the query: same plan).

create view factory_service_directory as
  select id, account_id, role, model_id, registrar_id
  from factory_services;
