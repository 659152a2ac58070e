-- Factory surface (issue 13): the thing's lifecycle state on its row, projected from the thing
-- actor by the actor store (new rows take the default until the actor, created in the same
-- transaction, projects its state). lifecycle_updated_at: when the state last changed.
alter table things
  add column lifecycle_state text not null default 'REGISTERED' check (lifecycle_state in
    ('REGISTERED', 'ROLLEDOFF', 'PROVISIONED', 'IN_FACTORY', 'HANDOVER_PENDING', 'ACTIVATED', 'DEACTIVATED', 'ANNIHILATED')),
  add column lifecycle_updated_at timestamptz;
update things t
  set lifecycle_state = a.state,
    lifecycle_updated_at = coalesce(a.snapshot -> 'context' ->> 'stateAt', a.snapshot -> 'context' ->> 'enrolledAt')::timestamptz
  from actors a where a.type = 'thing' and a.id = t.id::text;
-- GET /api/v1/things/resolve: (model, serial) in the caller's inventory
create index things_model_serial on things (account_id, model, serial);

-- The state-change log: every thing state change is a thing.stateChanged domain event, written by
-- the actor store in the transaction of the transition. This view reads them as rows; seq orders
-- them (one sequence for every event, so also across things: the feed's cursor).
create view thing_state_changes as
  select e.seq, e.actor_id::uuid as thing_id, e.account_id,
    e.payload ->> 'from' as from_state, e.payload ->> 'to' as to_state, e.payload ->> 'event' as event,
    (e.payload ->> 'at')::timestamptz as at
  from domain_events e
  -- entering ROLLEDOFF is the thing.enrolled event (it carries from/to/event/at): one event per new thing
  where e.actor_type = 'thing' and e.type in ('thing.stateChanged', 'thing.enrolled');
