-- Broker domain: device connectivity, latest telemetry, device twins, live broker nodes.

-- One row per thing that ever connected; `session_id` identifies the current MQTT connection so a
-- late disconnect of an older session (possibly on another node) never overwrites a newer one.
create table device_connectivity (
  thing_id text primary key,
  connected boolean not null default false,
  node_id text,
  session_id uuid,
  protocol_version integer,
  connected_at timestamptz,
  disconnected_at timestamptz,
  last_seen timestamptz
);

-- Latest value of every telemetry key of a thing (merged, written in batches).
create table device_telemetry_latest (
  thing_id text primary key,
  telemetry jsonb not null default '{}',
  updated_at timestamptz not null default now()
);

-- Device twin: reported state (from the device) and desired state (from tenants), each versioned.
create table device_twins (
  thing_id text primary key,
  reported jsonb not null default '{}',
  reported_version integer not null default 0,
  reported_at timestamptz,
  desired jsonb not null default '{}',
  desired_version integer not null default 0,
  desired_at timestamptz
);

-- Broker nodes alive (heartbeat), so a cluster-wide disconnect knows whose answers to wait for.
create table broker_nodes (
  node_id text primary key,
  heartbeat_at timestamptz not null default now()
);
