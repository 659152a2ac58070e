-- Device trust (issue 3): models (provisioning settings), things, serial identity mapping,
-- device certificates with their revoked flag, the CRL, claim-group secrets, licenses.

create table models (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  vid text not null check (vid ~ '^[0-9A-F]{4}$'),
  pid text not null check (pid ~ '^[0-9A-F]{4}$'),
  name text not null,
  internal boolean not null default false,
  provisioning_method text not null check (provisioning_method in ('none', 'auto', 'symmetric_key', 'certificate', 'webhook', 'claim_token')),
  -- method settings without secrets (rules, approval URL, manufacturer CA PEM)
  provisioning jsonb not null default '{}',
  -- AES-256-GCM sealed secret the service must recompute an HMAC with (group key, webhook secret)
  provisioning_secret bytea,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  -- the vid:pid descriptor is what firmware sends at enrollment: one model per descriptor
  unique (vid, pid)
);
create index models_account on models (account_id, id);

create table things (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  model_id uuid references models (id),
  manufacturer text not null,
  model text not null,
  serial text not null,
  metadata jsonb not null default '{}',
  -- how it enrolled (null until then)
  enrolled_by text,
  enrolled_at timestamptz,
  claim_group_id uuid,
  enrollment_token_hash bytea unique,
  enrollment_token_expires_at timestamptz,
  enrollment_token_used_at timestamptz,
  revoked_at timestamptz,
  created_at timestamptz not null default now()
);
-- serial identity mapping: (tenant, manufacturer, model, serial) -> one thingId
create unique index things_identity on things (account_id, manufacturer, model, serial);

create table device_certificates (
  serial text primary key,
  thing_id uuid not null references things (id),
  pem text not null,
  -- server-generated private key, sealed (AES-256-GCM) so an idempotent re-claim can return it
  sealed_private_key bytea,
  not_after timestamptz not null,
  revoked boolean not null default false,
  revoked_at timestamptz,
  created_at timestamptz not null default now()
);
create index device_certificates_thing on device_certificates (thing_id);
create index device_certificates_revoked on device_certificates (revoked_at) where revoked;

-- The device CA's current CRL (one row), shared by every node.
create table crl (
  id boolean primary key default true check (id),
  number bigint not null,
  der bytea not null,
  updated_at timestamptz not null default now()
);

-- Claim-group secrets (the group's lifecycle is the claimGroup actor): SHA-256 of the secret only.
create table claim_groups (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  secret_hash bytea not null unique,
  created_at timestamptz not null default now()
);
create index claim_groups_account on claim_groups (account_id);

-- Licenses granted or refused to devices: every decision is kept.
create table device_licenses (
  id uuid primary key,
  thing_id uuid not null references things (id),
  kind text not null check (kind in ('request', 'renew')),
  decision text not null check (decision in ('granted', 'denied')),
  reason text,
  expires_at timestamptz,
  created_at timestamptz not null default now()
);
create index device_licenses_thing on device_licenses (thing_id, created_at);

-- Single-use access codes with which another account joins a thing (POST /api/v1/things/join).
create table thing_access_codes (
  code_hash bytea primary key,
  thing_id uuid not null references things (id),
  issued_by_account uuid not null,
  expires_at timestamptz not null,
  used_at timestamptz,
  used_by_account uuid,
  created_at timestamptz not null default now()
);
