-- Warehouse data ingest (/wms-ingest/v1, issue 17). A partner is an account (partner_id = account id).

-- The warehouses a partner ingests into. `principals` null: every user of the account with an
-- ingest role; otherwise only these subjects (credential principal ids = user subjects).
create table ingest_warehouses (
  account_id uuid not null references accounts (id) on delete cascade,
  warehouse_id text not null,
  name text not null,
  principals text[],
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (account_id, warehouse_id)
);

-- The normalized records, one per (partner, warehouse, resource, source_id), at their newest
-- source_version. internal_id is stable across versions.
create table ingest_records (
  internal_id uuid primary key,
  account_id uuid not null,
  warehouse_id text not null,
  resource text not null,
  source_id text not null,
  source_version bigint not null,
  data jsonb not null,
  updated_at timestamptz not null default now(),
  unique (account_id, warehouse_id, resource, source_id)
);

-- Items that passed the schema but failed a business rule, held until released or discarded.
create table ingest_quarantine (
  id uuid primary key,
  seq bigint generated always as identity unique,
  account_id uuid not null,
  warehouse_id text not null,
  resource text not null,
  source_id text not null,
  source_version bigint not null,
  item jsonb not null,
  code text not null,
  reason text not null,
  correlation_id text not null,
  job_id uuid,
  created_at timestamptz not null default now()
);
create index ingest_quarantine_list on ingest_quarantine (account_id, warehouse_id, seq);

-- Request-level idempotency: the first answer per (partner, correlation_id), written in the
-- transaction that processed the request (a concurrent twin waits on this key, then reads it).
create table ingest_requests (
  account_id uuid not null,
  correlation_id text not null,
  request_hash text not null,
  -- the first answer, replayed to retries: its HTTP status code and body (not a lifecycle state)
  response_status integer,
  response jsonb,
  created_at timestamptz not null default now(),
  primary key (account_id, correlation_id)
);
create index ingest_requests_age on ingest_requests (created_at);

-- Bulk jobs. state, started_at and completed_at are the projection of the ingestJob actor
-- (written by the actor store only); the counters are progress, written per chunk.
create table ingest_jobs (
  id uuid primary key,
  seq bigint generated always as identity unique,
  account_id uuid not null,
  correlation_id text not null,
  warehouse_id text not null,
  resource text not null,
  mode text not null check (mode in ('DELTA', 'FULL_REFRESH')),
  state text not null default 'QUEUED',
  total_items integer not null,
  processed_through integer not null default 0,
  accepted integer not null default 0,
  replayed integer not null default 0,
  quarantined integer not null default 0,
  rejected integer not null default 0,
  deleted integer not null default 0,
  created_at timestamptz not null default now(),
  started_at timestamptz,
  completed_at timestamptz
);
create index ingest_jobs_in_flight on ingest_jobs (account_id, warehouse_id, resource) where state in ('QUEUED', 'RUNNING');
create index ingest_jobs_list on ingest_jobs (account_id, warehouse_id, seq);
create index ingest_jobs_completed on ingest_jobs (completed_at) where completed_at is not null;

-- A job's items as submitted, until the job completes.
create table ingest_job_items (
  job_id uuid not null references ingest_jobs (id) on delete cascade,
  seq integer not null,
  source_id text,
  item jsonb not null,
  primary key (job_id, seq)
);
create index ingest_job_items_source on ingest_job_items (job_id, source_id);

-- Per-item errors of a job (QUARANTINED, REJECTED), kept 30 days after the job completed.
create table ingest_job_errors (
  job_id uuid not null references ingest_jobs (id) on delete cascade,
  seq integer not null,
  source_id text,
  status text not null check (status in ('QUARANTINED', 'REJECTED')),
  code text not null,
  reason text not null,
  quarantine_id uuid,
  primary key (job_id, seq)
);
