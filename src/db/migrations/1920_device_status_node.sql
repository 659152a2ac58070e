-- The broker's published connectivity read model names the node holding a connected device's
-- session (the console's sessions view). A view's columns may only be appended.
create or replace view device_status as
  select thing_id, connected, connected_at, disconnected_at, last_seen, protocol_version,
    case when connected then node_id end as node_id
  from device_connectivity;
