-- Quotas and organizations (spec document 1: Quota, quota increase request, rules 1-7).

-- Platform quota defaults, seeded as data (GET /api/v1/quotas/defaults).
create table quota_defaults (
  service_code text not null,
  quota_code text not null,
  name text not null,
  default_value bigint not null check (default_value >= 0),
  max_value bigint check (max_value is null or max_value >= default_value),
  adjustable boolean not null,
  position integer not null,
  primary key (service_code, quota_code)
);
insert into quota_defaults (service_code, quota_code, name, default_value, max_value, adjustable, position) values
  ('organizations', 'member-accounts-per-organization', 'Member accounts per organization', 10, null, true, 1),
  ('organizations', 'organizational-units-per-organization', 'Organizational units per organization', 2000, null, true, 2),
  ('organizations', 'ou-nesting-depth', 'OU nesting depth', 5, 5, false, 3),
  ('organizations', 'scps-per-organization', 'SCPs per organization', 10000, null, true, 4),
  ('organizations', 'scps-attached-per-entity', 'SCPs attached per entity', 5, 5, false, 5),
  ('organizations', 'scp-document-size', 'SCP document size (characters)', 5120, 5120, false, 6),
  ('organizations', 'delegated-administrators-per-organization', 'Delegated administrators per organization', 20, null, true, 7);

create table organizations (
  id uuid primary key,
  name text not null,
  management_account_id uuid not null unique references accounts (id),
  created_by text,
  created_at timestamptz not null default now()
);

-- An account belongs to at most one organization. status 'leaving' while a gated leave runs.
create table organization_members (
  account_id uuid primary key references accounts (id),
  organization_id uuid not null references organizations (id),
  status text not null default 'active' check (status in ('active', 'leaving')),
  leave_id uuid,
  joined_at timestamptz not null default now()
);
create index organization_members_org on organization_members (organization_id, joined_at);

-- Quota records: of a standalone account (account_id) or of an organization (organization_id).
create table quotas (
  id uuid primary key default gen_random_uuid(),
  account_id uuid references accounts (id),
  organization_id uuid references organizations (id),
  service_code text not null,
  quota_code text not null,
  default_value bigint not null,
  applied_value bigint not null,
  max_value bigint,
  adjustable boolean not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  check ((account_id is null) <> (organization_id is null)),
  foreign key (service_code, quota_code) references quota_defaults (service_code, quota_code)
);
create unique index quotas_account on quotas (account_id, service_code, quota_code) where account_id is not null;
create unique index quotas_organization on quotas (organization_id, service_code, quota_code) where organization_id is not null;

-- Quota increase requests: a queryable projection of the quotaRequest actors (state in `status`).
create table quota_requests (
  id uuid primary key,
  kind text not null check (kind in ('account', 'organization', 'leave')),
  account_id uuid not null references accounts (id),
  organization_id uuid references organizations (id),
  leave_request_account_id uuid references accounts (id),
  leave_id uuid,
  service_code text not null,
  quota_code text not null,
  desired_value bigint not null,
  reason text,
  status text not null check (status in ('pending', 'approved', 'denied', 'cancelled')),
  decision_reason text,
  decided_by text,
  decided_at timestamptz,
  created_by text,
  created_at timestamptz not null default now(),
  foreign key (service_code, quota_code) references quota_defaults (service_code, quota_code)
);
create index quota_requests_pending on quota_requests (created_at, id) where status = 'pending';
create index quota_requests_account on quota_requests (account_id, created_at);
create index quota_requests_org on quota_requests (organization_id, created_at);
create index quota_requests_leave on quota_requests (leave_id) where leave_id is not null;
