-- Factory-service policies (issue 32): the factory:<Resource>:<Verb> actions an account admin
-- allowed the service, sorted and distinct; null = the documented default of its role
-- (src/factory/policy.ts). Cached with the signing identity and dropped cluster-wide on change.
alter table factory_services add column policy_allow text[];
