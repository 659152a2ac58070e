-- IAM (issue 5): static and temporary credentials, roles last asserted by the identity provider,
-- identity-center account assignments, service control policies, cache-invalidation node registry.

-- Static (AKSV) and temporary (ASIA) access keys. Secrets and session tokens: SHA-256 only.
create table iam_credentials (
  id uuid primary key,
  account_id uuid not null references accounts (id) on delete cascade,
  access_key_id text not null unique check (access_key_id ~ '^(AKSV|ASIA)[0-9A-F]{16}$'),
  kind text not null check (kind in ('static', 'temporary')),
  secret_hash bytea not null,
  session_token_hash bytea,
  status text not null check (status in ('ACTIVE', 'INACTIVE', 'REVOKED')),
  principal_id text not null,
  principal_type text not null check (principal_type in ('user', 'federated')),
  realm text not null,
  description text not null default '',
  created_at timestamptz not null default now(),
  expires_at timestamptz,
  last_used_at timestamptz,
  revoked_at timestamptz,
  check ((kind = 'temporary') = (session_token_hash is not null and expires_at is not null))
);
create index iam_credentials_owner on iam_credentials (account_id, principal_id, kind);
create index iam_credentials_expiry on iam_credentials (expires_at) where kind = 'temporary';

-- Roles the identity provider last asserted for a tenant IAM user (acc-* realm): a credential's
-- principal gets these.
create table iam_principal_roles (
  account_id uuid not null references accounts (id) on delete cascade,
  principal_id text not null,
  roles text[] not null,
  updated_at timestamptz not null default now(),
  primary key (account_id, principal_id)
);

-- Identity-center (idc-*) users reach accounts through assignments (platform admins manage them).
create table iam_account_assignments (
  account_id uuid not null references accounts (id) on delete cascade,
  realm text not null,
  principal_id text not null,
  roles text[] not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  assigned_by text,
  primary key (realm, principal_id, account_id)
);
create index iam_account_assignments_account on iam_account_assignments (account_id);

-- Service control policies (deny-based) and their attachments to accounts.
create table iam_scps (
  id uuid primary key,
  name text not null unique,
  description text not null default '',
  document jsonb not null,
  document_size integer not null,
  created_at timestamptz not null default now(),
  created_by text
);
create table iam_scp_attachments (
  scp_id uuid not null references iam_scps (id) on delete restrict,
  account_id uuid not null references accounts (id) on delete cascade,
  attached_at timestamptz not null default now(),
  attached_by text,
  primary key (account_id, scp_id)
);

-- Live gateway nodes (heartbeat): a revocation waits until each of them acknowledged it.
create table iam_cache_nodes (
  node_id text primary key,
  seen_at timestamptz not null default now()
);
