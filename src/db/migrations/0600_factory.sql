-- Factory surface, part 1 (issue 13): factory services and the replay guard of signed requests.

-- Factory-service backends. state, rotation_pending, deleted_at and drained_at are the projection
-- of the factoryService actor (written by the actor store only; new rows take the defaults until
-- the actor, created in the same transaction, projects its values).
create table factory_services (
  id uuid primary key,
  account_id uuid not null references accounts (id),
  role text not null check (role in ('identify', 'provision')),
  model_id uuid not null references models (id),
  -- registrars arrive with a later issue: no foreign key yet
  registrar_id uuid,
  endpoint_url text not null,
  access_key_id text not null unique check (access_key_id ~ '^AKSV[0-9A-F]{16}$'),
  -- AES-256-GCM sealed: the gateway recomputes HMACs with the secret, so it cannot be a hash
  secret_sealed bytea not null,
  -- the new secret of a rotation until confirmed (both verify meanwhile)
  pending_secret_sealed bytea,
  state text not null default 'ACTIVE' check (state in ('ACTIVE', 'SOFT_DELETED', 'HARD_DELETED')),
  rotation_pending boolean not null default false,
  deleted_at timestamptz,
  drained_at timestamptz,
  last_health_check_at timestamptz,
  last_health_check_status text check (last_health_check_status in ('HEALTHY', 'UNHEALTHY')),
  last_health_check_http_status integer,
  last_health_check_latency_ms integer,
  last_health_check_error text,
  created_at timestamptz not null,
  updated_at timestamptz not null
);
create index factory_services_account on factory_services (account_id, id);
-- one registered backend per (model, role): the saga calls "the model's provision-role service"
create unique index factory_services_model_role on factory_services (model_id, role) where state = 'ACTIVE';

-- Saga legs in flight that call a factory service. The PROVISION saga (a later issue) inserts a
-- row when a leg starts and deletes it when the leg ends; draining waits until none is left.
create table factory_service_leg_refs (
  factory_service_id uuid not null references factory_services (id) on delete cascade,
  leg_id text not null,
  created_at timestamptz not null default now(),
  primary key (factory_service_id, leg_id)
);

-- Signatures already accepted, kept for the clock-skew window (shared by every node, so a replay
-- to another node is refused too); a scheduled job deletes expired rows. Unlogged: one insert per
-- signed request without a WAL flush; a Postgres crash empties it, which reopens replays of
-- requests signed in the 5 minutes before the crash (docs/decisions.md).
create unlogged table factory_signature_replays (
  signature_hash bytea primary key,
  expires_at timestamptz not null
);
create index factory_signature_replays_expiry on factory_signature_replays (expires_at);
