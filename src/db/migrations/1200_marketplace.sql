-- Marketplace products (issue 20 item 1): one of an account's models offered with a copy of some of
-- its software bundles. The lifecycle is the marketplaceProduct actor (machines/marketplaceProduct.ts):
-- every column below `created_at` is its projection, written only by the actor store.
-- model_id, vid and pid are copied from the model (no foreign key: the product holds copies of the
-- bundle descriptors and outlives changes of the model; trust's models are another domain's table).
create table marketplace_products (
  id uuid primary key,
  account_id uuid not null references accounts (id) on delete cascade,
  model_id uuid not null,
  vid text not null,
  pid text not null,
  created_at timestamptz not null,
  -- projection of the actor's snapshot
  state text not null default 'DRAFT',
  name text not null default '',
  description text not null default '',
  version text not null default '',
  bundles jsonb not null default '[]',
  published_version text,
  published_at timestamptz,
  unpublished_at timestamptz,
  updated_at timestamptz
);

-- the public catalogue: published products, newest first (keyset on created_at, id)
create index marketplace_products_published on marketplace_products (created_at desc, id desc) where state = 'PUBLISHED';
-- an account's own products in any state, newest first
create index marketplace_products_account on marketplace_products (account_id, created_at desc, id desc);
-- the model filters
create index marketplace_products_descriptor on marketplace_products (vid, pid);
create index marketplace_products_model on marketplace_products (model_id);
