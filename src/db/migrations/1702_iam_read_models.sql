-- Architecture step 2 (issue 33, item 2): iam publishes which accounts exist (test/architectureRules.ts,
-- PUBLISHED_READ_MODELS). Quotas reads this view, never the table; its `select ... for update` on the
-- view locks the account's row as it did on the table (a simple view: the lock reaches its table).

create view account_directory as
  select id, name, created_at
  from accounts;
