-- A static credential's status is the projection of its machine (machines/staticCredential.ts):
-- the actor store writes it in the transaction that inserts the row (null until then, and for
-- the deleted state just before the row goes). Temporary (STS) credentials are plain rows whose
-- lifecycle is `revoked_at` and `expires_at`; their status is left null.
alter table iam_credentials alter column status drop not null;
