-- Factory surface, part 2 (issue 14): models in full, vendors, registrars, access requests,
-- factory registrations, eligibility artifacts and grants, reference requests, device deeplinks,
-- thing references. Lifecycle columns (state, decided_*, ...) are projections of the actors
-- (written by the actor store only; new rows take the defaults until the actor projects).

-- Models (trust's table): a description, software and driver bundles, and who uses it.
alter table models add column description text not null default '';
alter table models add column bundles jsonb not null default '[]';

-- Share deeplinks of a model's public descriptor: SHA-256 of the token only.
create table model_shares (
  id uuid primary key,
  model_id uuid not null references models (id) on delete cascade,
  account_id uuid not null references accounts (id),
  token_hash bytea not null unique,
  expires_at timestamptz not null,
  created_by text not null,
  created_at timestamptz not null default now()
);
create index model_shares_model on model_shares (model_id);

-- Models another account imported by a share deeplink (readable and listed there, read-only).
create table model_imports (
  account_id uuid not null references accounts (id),
  model_id uuid not null references models (id) on delete cascade,
  share_id uuid references model_shares (id) on delete set null,
  created_at timestamptz not null default now(),
  primary key (account_id, model_id)
);
create index model_imports_model on model_imports (model_id);

-- Vendors: the account's platform VID namespace (one per account, one account per VID).
-- Assigned VIDs come from 0x6000-0x9FFF (test VIDs FFF1-FFF4 and existing ones stay unassigned).
create sequence vendor_vid_seq as integer minvalue 24576 maxvalue 40959 start 24576 no cycle;
create table vendors (
  account_id uuid primary key references accounts (id),
  vid text not null unique check (vid ~ '^[0-9A-F]{4}$'),
  created_by text not null,
  created_at timestamptz not null default now()
);

create table registrars (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  name text not null,
  description text not null default '',
  state text not null default 'PENDING' check (state in ('PENDING', 'APPROVED', 'REJECTED', 'DELETED')),
  canonical_model_id uuid references models (id),
  decided_at timestamptz,
  decided_by text,
  reason text,
  created_at timestamptz not null,
  updated_at timestamptz not null
);
create index registrars_account on registrars (account_id, id) where state <> 'DELETED';
create index registrars_state on registrars (state, id);
create index registrars_model on registrars (canonical_model_id);

create table access_requests (
  id uuid primary key,
  requester_account_id uuid not null references accounts (id),
  owner_account_id uuid not null references accounts (id),
  registrar_id uuid not null references registrars (id),
  note text,
  state text not null default 'PENDING' check (state in ('PENDING', 'APPROVED', 'REJECTED')),
  decided_at timestamptz,
  decided_by text,
  reason text,
  created_at timestamptz not null
);
create index access_requests_owner on access_requests (owner_account_id, id);
create index access_requests_requester on access_requests (requester_account_id, id);
-- one open request per (requester, registrar): concurrent requests converge on it
create unique index access_requests_one_pending on access_requests (requester_account_id, registrar_id) where state = 'PENDING';

-- The account's factory capability badge (actor id = account id).
create table factory_registrations (
  account_id uuid primary key references accounts (id),
  state text not null default 'REQUESTED' check (state in ('REQUESTED', 'APPROVED', 'REFUSED', 'REVOKED')),
  note text,
  requested_at timestamptz not null,
  requested_by text not null,
  decided_at timestamptz,
  decided_by text,
  reason text
);
create index factory_registrations_state on factory_registrations (state, requested_at);

-- Eligibility artifacts: revocable, expiring tokens (SHA-256 only); expiry is computed at use.
create table eligibility_artifacts (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  token_hash bytea not null unique,
  note text,
  expires_at timestamptz not null,
  revoked_at timestamptz,
  created_by text not null,
  created_at timestamptz not null
);
create index eligibility_artifacts_account on eligibility_artifacts (account_id, id);

create table eligibility_grants (
  id uuid primary key,
  artifact_id uuid not null references eligibility_artifacts (id),
  owner_account_id uuid not null references accounts (id),
  requester_account_id uuid not null references accounts (id),
  state text not null default 'PENDING' check (state in ('PENDING', 'APPROVED', 'REJECTED')),
  decided_at timestamptz,
  decided_by text,
  reason text,
  created_by text not null,
  created_at timestamptz not null,
  -- redeeming the same artifact again answers the same grant
  unique (artifact_id, requester_account_id)
);
create index eligibility_grants_owner on eligibility_grants (owner_account_id, state, id);
create index eligibility_grants_pair on eligibility_grants (owner_account_id, requester_account_id) where state = 'APPROVED';

create table reference_requests (
  id uuid primary key,
  requester_account_id uuid not null references accounts (id),
  owner_account_id uuid not null references accounts (id),
  registrar_id uuid not null references registrars (id),
  -- the standing filter: {serial_prefix?, manufacturer?} over the registrar's canonical model's things
  filter jsonb not null default '{}',
  note text,
  state text not null default 'PENDING' check (state in ('PENDING', 'APPROVED', 'REJECTED', 'REVOKED')),
  decided_at timestamptz,
  decided_by text,
  reason text,
  revoked_at timestamptz,
  created_by text not null,
  created_at timestamptz not null
);
create index reference_requests_requester on reference_requests (requester_account_id, state, id);
create index reference_requests_owner on reference_requests (owner_account_id, state, id);
create index reference_requests_approved on reference_requests (registrar_id) where state = 'APPROVED';

-- Device deeplinks: single-thing tokens (SHA-256 only).
create table device_deeplinks (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  thing_id uuid not null references things (id),
  token_hash bytea not null unique,
  expires_at timestamptz not null,
  redemptions integer not null default 0,
  created_by text not null,
  created_at timestamptz not null
);
create index device_deeplinks_account on device_deeplinks (account_id, id);

-- Thing references: a thing of another account shown in the holder's repository, from an
-- approved reference request (removed when it is revoked) or a redeemed device deeplink.
create table thing_references (
  id uuid primary key default gen_random_uuid(),
  account_id uuid not null references accounts (id),
  thing_id uuid not null references things (id) on delete cascade,
  owner_account_id uuid not null references accounts (id),
  reference_request_id uuid references reference_requests (id) on delete cascade,
  device_deeplink_id uuid references device_deeplinks (id) on delete set null,
  source text not null check (source in ('reference_request', 'device_deeplink')),
  created_at timestamptz not null default now()
);
create unique index thing_references_request on thing_references (reference_request_id, thing_id) where source = 'reference_request';
create unique index thing_references_deeplink on thing_references (account_id, thing_id) where source = 'device_deeplink';
create index thing_references_account on thing_references (account_id, id);

-- Where the reconcile sweep of thing.enrolled events stands (domain_events.seq).
create table registry_cursors (
  name text primary key,
  seq bigint not null
);
create index things_model_id on things (model_id, account_id);
