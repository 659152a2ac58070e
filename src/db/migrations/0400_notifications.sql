-- Notifications (issue 6): categories, templates, notifications (plain rows), per-user state of
-- tenant-scope ones, read/dismiss watermarks (read-all and dismiss-all are one upsert), recipient
-- preferences, the stream event log (SSE id / Last-Event-ID replay) and stream cookie sessions.

create table notification_categories (
  id text primary key check (id ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  names jsonb not null,                       -- {"en": "Devices", "de": "Geräte", ...}; "en" required
  created_by text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

create table notification_templates (
  id text primary key check (id ~ '^[a-z0-9][a-z0-9-]{0,62}/[a-z0-9][a-z0-9-]{0,62}$'),
  category_id text not null references notification_categories (id),
  subject text not null,
  title text not null,
  body_text text not null,
  body_html text not null,
  created_by text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

create table notifications (
  seq bigserial primary key,
  id uuid not null unique default gen_random_uuid(),
  scope text not null check (scope in ('user', 'tenant')),
  -- scope user: the recipient's subject (sub); scope tenant: the account id
  subscriber_id text not null,
  template_id text not null,
  category_id text not null,
  severity text not null check (severity in ('info', 'warning', 'error', 'critical')),
  title text not null,
  body text not null,
  data jsonb not null default '{}',
  action_url text,
  channels text[] not null,
  publisher text,
  -- domain event this notification was made from: unique, so each event yields one notification cluster-wide
  source_event_id uuid unique,
  created_at timestamptz not null default now()
);
create index notifications_feed on notifications (scope, subscriber_id, seq desc);

-- Per-user read / dismissed state of single notifications (user- and tenant-scope alike).
create table notification_receipts (
  user_sub text not null,
  notification_seq bigint not null references notifications (seq) on delete cascade,
  read_at timestamptz,
  dismissed_at timestamptz,
  primary key (user_sub, notification_seq)
);

-- read-all / dismiss-all: everything with seq <= the watermark is read / dismissed for that user.
-- scope_key '' = the user's own user-scope notifications; otherwise the account id (tenant-scope).
create table notification_marks (
  user_sub text not null,
  scope_key text not null,
  read_through bigint not null default 0,
  dismissed_through bigint not null default 0,
  primary key (user_sub, scope_key)
);

create table notification_preferences (
  user_sub text primary key,
  global_mute boolean not null default false,
  disabled_categories text[] not null default '{}',
  quiet_hours jsonb,                          -- {"start": "22:00", "end": "07:00", "timeZone": "Europe/Berlin"}
  updated_at timestamptz not null default now()
);

-- Stream events (SSE `id:`): created (to a user or an account) and dismissed (to a user).
create table notification_stream_events (
  seq bigserial primary key,
  target_kind text not null check (target_kind in ('user', 'tenant')),
  target text not null,
  data jsonb not null,
  created_at timestamptz not null default now()
);
create index notification_stream_events_target on notification_stream_events (target_kind, target, seq);
create index notification_stream_events_created on notification_stream_events (created_at);

-- Stream cookies: only the SHA-256 of the random token is stored.
create table notification_stream_sessions (
  token_hash bytea primary key,
  user_sub text not null,
  account_id text,
  expires_at timestamptz not null,
  created_at timestamptz not null default now()
);
create index notification_stream_sessions_expires on notification_stream_sessions (expires_at);
