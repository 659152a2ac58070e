-- Offline device commands (issue 18 item 3): a command with a time to live, stored while the device
-- is offline and delivered when it connects again. The lifecycle is the deviceCommand actor
-- (machines/deviceCommand.ts); status, delivered_at, completed_at and response are its projection.
create table device_commands (
  id uuid primary key,
  account_id uuid not null references accounts (id) on delete cascade,
  thing_id text not null,
  name text not null,
  payload jsonb, -- null: no payload
  ttl_seconds integer not null check (ttl_seconds > 0),
  status text not null default 'pending',
  created_at timestamptz not null,
  expires_at timestamptz not null,
  delivered_at timestamptz,
  completed_at timestamptz,
  response jsonb
);

-- a device's commands by status, oldest first (delivery on reconnect, the list route)
create index device_commands_thing on device_commands (thing_id, status, created_at, id);
-- the expiry sweep reads only the open ones
create index device_commands_open on device_commands (expires_at) where status in ('pending', 'delivered');
