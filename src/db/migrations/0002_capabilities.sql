-- Account capabilities (spec document 1): grant-based business qualifications, start empty.
-- The IAM domain manages them (platform admins grant and revoke); the capability layer reads them.
create table account_capabilities (
  account_id uuid not null references accounts (id) on delete cascade,
  capability text not null check (capability in ('enroll_things', 'approve_licenses', 'publish_marketplace', 'manage_ota_rollouts')),
  granted_at timestamptz not null default now(),
  granted_by text,
  primary key (account_id, capability)
);
