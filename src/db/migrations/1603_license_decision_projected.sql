-- Architecture step 2 (issue 33): a license row is inserted with the request only; its decision
-- (pending, granted or denied) is the license actor's, projected by the actor store in the same
-- transaction (machines/license.ts decides a new request at its birth). The column is null only
-- inside that transaction, between the insert and the projection.
alter table device_licenses alter column decision drop not null;
