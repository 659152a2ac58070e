-- Roles an account admin assigned to a tenant IAM user (issue 32): the user's static access keys
-- carry these instead of the roles the identity provider last asserted (iam_principal_roles).
-- No row: nothing assigned (an empty assignment deletes the row).
create table iam_assigned_roles (
  account_id uuid not null references accounts (id) on delete cascade,
  principal_id text not null,
  roles text[] not null check (cardinality(roles) > 0),
  updated_at timestamptz not null default now(),
  assigned_by text not null,
  primary key (account_id, principal_id)
);
