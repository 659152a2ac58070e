-- IAM cache generation: bumped by every invalidation that must take effect at once. Each node reads
-- it with its heartbeat (every 5 s) and drops all its IAM caches when it missed a message.
create table iam_cache_generation (
  id boolean primary key default true check (id),
  n bigint not null default 0
);
insert into iam_cache_generation (id, n) values (true, 0);
