-- How a rule's events go to its sink (issue 34): one CloudEvent per message, or batches of one
-- thing's consecutive events (CloudEvents' batched format).
alter table bridge_rules add column format text not null default 'event' check (format in ('event', 'batch'));
