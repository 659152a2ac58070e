-- Foundation: accounts, the actor store, domain events (outbox), development issuer keys.
create extension if not exists pgcrypto;

create table accounts (
  id uuid primary key,
  name text not null,
  created_at timestamptz not null default now(),
  created_by text
);

-- Every lifecycle resource is an XState actor: its persisted snapshot, optimistic version.
create table actors (
  type text not null,
  id text not null,
  state text not null,
  snapshot jsonb not null,
  version integer not null default 1,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (type, id)
);

-- Domain events emitted by actors, written in the same transaction as the snapshot.
create table domain_events (
  seq bigserial primary key,
  id uuid not null default gen_random_uuid(),
  actor_type text not null,
  actor_id text not null,
  type text not null,
  account_id uuid,
  payload jsonb not null default '{}',
  created_at timestamptz not null default now()
);
create index domain_events_actor on domain_events (actor_type, actor_id, seq);
create index domain_events_created on domain_events (created_at);

create table dev_issuer_keys (
  kid text primary key,
  private_jwk jsonb not null,
  public_jwk jsonb not null,
  created_at timestamptz not null default now()
);

-- Cluster messages too large for a NOTIFY payload travel by reference (swept by a job).
create table cluster_messages (
  id uuid primary key default gen_random_uuid(),
  body text not null,
  created_at timestamptz not null default now()
);
