import { invalid } from '../lib/errors.js';

/**
 * Factory-service policies (issue 32, docs/decisions.md "Factory-service policies"). A factory
 * service's signed requests are authorized per action (`factory:<Resource>:<Verb>`) by its
 * policy: the default of its role, or the list an account admin set with
 * `PUT /api/v1/factory-services/{id}/policy`. The hook in src/http/auth/plugin.ts checks the
 * route's action against the list the signing identity carries; nothing else decides.
 */
export type ServiceRole = 'identify' | 'provision';

/**
 * How far a grantable action reaches for a service. `model`: only the things, enrollments,
 * provisioning runs or model of the service's own model (others read as absent, 404);
 * `registrar`: the /provisioning/v1 feed and subscriptions, narrowed to the models of the
 * service's registrar when it has one (the account's otherwise);
 * `self`: the service itself (its own credentials, its own health check); `account`: the
 * account's resources, as for a user of the account.
 */
export type Scope = 'model' | 'registrar' | 'self' | 'account';

interface Grantable {
  scope: Scope;
  /** the roles whose default policy holds it */
  defaultFor: readonly ServiceRole[];
}

const BOTH = ['identify', 'provision'] as const;
const PROVISION = ['provision'] as const;
const NONE = [] as const;
const read = (scope: Scope = 'account'): Grantable => ({ scope, defaultFor: BOTH });
const grant = (scope: Scope, defaultFor: readonly ServiceRole[] = NONE): Grantable => ({ scope, defaultFor });

/**
 * Every action a factory service may be granted: the rows of the spec's factory-surface table
 * (document 2) that are not platform operators', and the feed and fleet reads services used
 * before policies existed. Defaults: every read of the account's factory surface for both
 * roles, and the writes each role needs in the PROVISION saga.
 */
export const GRANTABLE: Readonly<Record<string, Grantable>> = {
  'factory:AccessRequest:List': read(),
  'factory:AccessRequest:Read': read(),
  'factory:AccessRequest:Approve': grant('account'),
  'factory:AccessRequest:Decide': grant('account'),
  'factory:AccessRequest:Reject': grant('account'),
  'factory:DeviceDeeplink:List': read(),
  'factory:DeviceDeeplink:Create': grant('account'),
  'factory:DeviceDeeplink:Delete': grant('account'),
  'factory:DeviceDeeplink:Redeem': grant('account'),
  'factory:EligibilityArtifact:List': read(),
  'factory:EligibilityArtifact:Read': read(),
  'factory:EligibilityArtifact:Create': grant('account'),
  'factory:EligibilityArtifact:Revoke': grant('account'),
  'factory:EligibilityArtifact:Redeem': grant('account'),
  'factory:EligibilityGrant:List': read(),
  'factory:EligibilityGrant:Approve': grant('account'),
  'factory:EligibilityGrant:Reject': grant('account'),
  'factory:Enrollment:List': read('model'),
  'factory:Enrollment:Read': read('model'),
  'factory:Enrollment:Create': grant('model', PROVISION),
  'factory:FactoryRegistration:Read': read(),
  'factory:FactoryRegistration:Request': grant('account'),
  'factory:FactoryService:List': read(),
  'factory:FactoryService:Read': read(),
  'factory:FactoryService:RotateCredentials': grant('self', BOTH),
  'factory:FactoryService:ConfirmRotation': grant('self', BOTH),
  'factory:FactoryService:HealthCheck': grant('self', BOTH),
  'factory:FactoryService:Create': grant('account'),
  'factory:FactoryService:Update': grant('account'),
  'factory:FactoryService:Delete': grant('account'),
  'factory:FactoryService:Drain': grant('account'),
  'factory:IdentityBlacklist:List': read(),
  'factory:IdentityBlacklist:Check': read(),
  'factory:IdentityBlacklist:ListDeltas': read(),
  'factory:IdentityBlacklist:GetSnapshot': read(),
  'factory:Model:List': read('model'),
  'factory:Model:Read': read('model'),
  'factory:Model:Update': grant('model'),
  'factory:Model:Delete': grant('model'),
  'factory:Model:Share': grant('model'),
  // a new model: nothing to scope (the service does not see it afterwards unless it is its own)
  'factory:Model:Create': grant('account'),
  'factory:Model:Import': grant('account'),
  'factory:ProvisioningRun:List': read('model'),
  'factory:ProvisioningRun:Read': read('model'),
  'factory:ReferenceRequest:List': read(),
  'factory:ReferenceRequest:ListInbox': read(),
  'factory:ReferenceRequest:Read': read(),
  'factory:ReferenceRequest:Create': grant('account'),
  'factory:ReferenceRequest:Revoke': grant('account'),
  'factory:ReferenceRequest:Approve': grant('account'),
  'factory:ReferenceRequest:Reject': grant('account'),
  'factory:Registrar:List': read(),
  'factory:Registrar:Read': read(),
  'factory:Registrar:Create': grant('account'),
  'factory:Registrar:Update': grant('account'),
  'factory:Registrar:Delete': grant('account'),
  'factory:StateChange:List': read('registrar'),
  'factory:StateChangeSubscription:List': read('registrar'),
  'factory:StateChangeSubscription:Read': read('registrar'),
  'factory:StateChangeSubscription:Create': grant('registrar', PROVISION),
  'factory:StateChangeSubscription:Update': grant('registrar', PROVISION),
  'factory:StateChangeSubscription:Delete': grant('registrar', PROVISION),
  // GET /api/v1/things and /things/resolve: its model; /provisioning/v1/things (the feed's full sync): its registrar's
  'factory:Thing:List': read('model'),
  'factory:Thing:Read': read('model'),
  'factory:Thing:ReadState': read('model'),
  'factory:Thing:ReadFactoryEligibility': read('model'),
  // the spec gives starting the saga and the backend's provisioning-result report one action
  'factory:Thing:Provision': grant('model', BOTH),
  'factory:Thing:Handover': grant('model', PROVISION),
  'factory:Vendor:Read': read(),
  'factory:Vendor:Assign': grant('account'),
};

/** Actions of the factory surface no policy may hold, and why (the 400 says it). */
export const NEVER_GRANTABLE: Readonly<Record<string, string>> = {
  'factory:FactoryRegistration:Approve': 'platform operators decide factory registrations',
  'factory:FactoryRegistration:Refuse': 'platform operators decide factory registrations',
  'factory:FactoryRegistration:Revoke': 'platform operators decide factory registrations',
  'factory:FactoryRegistration:List': "the pending queue is the platform operators'",
  'factory:Registrar:Approve': 'platform operators decide registrars',
  'factory:Registrar:Reject': 'platform operators decide registrars',
  'factory:Model:CreateInternal': 'platform operators create internal models',
  'factory:FactoryService:GetPolicy': "a service's policy is managed by the account's users",
  'factory:FactoryService:PutPolicy': 'a service may not widen its own policy',
};

const defaults: Record<ServiceRole, readonly string[]> = {
  identify: Object.keys(GRANTABLE).filter((a) => GRANTABLE[a].defaultFor.includes('identify')).sort(),
  provision: Object.keys(GRANTABLE).filter((a) => GRANTABLE[a].defaultFor.includes('provision')).sort(),
};

/** The default policy of a service role. */
export function defaultPolicy(role: string): readonly string[] {
  return defaults[role as ServiceRole] ?? [];
}

/** What a service is allowed: its stored list, or (null) its role's default. */
export function effectivePolicy(role: string, stored: readonly string[] | null): readonly string[] {
  return stored ?? defaultPolicy(role);
}

/** Actions of a given scope (the README and the decisions list them). */
export function actionsScoped(scope: Scope): string[] {
  return Object.keys(GRANTABLE).filter((a) => GRANTABLE[a].scope === scope).sort();
}

/**
 * The stored form of an `allow` list (distinct, sorted), or a 400 naming the first entry no
 * policy may hold. `declared` tells an action some route carries from an unknown one.
 */
export function normalizePolicy(allow: readonly string[], declared: (action: string) => boolean): string[] {
  allow.forEach((action, i) => {
    if (Object.hasOwn(GRANTABLE, action)) return;
    const at = `allow[${i}]: ${JSON.stringify(action.slice(0, 100))}`;
    if (Object.hasOwn(NEVER_GRANTABLE, action)) throw invalid(`${at} is never granted to a factory service: ${NEVER_GRANTABLE[action]}`, { type: 'policy-action-not-grantable' });
    if (declared(action)) throw invalid(`${at} is not an action of the factory surface a service may be granted (tenant-plane and device operations stay with the account's users)`, { type: 'policy-action-not-grantable' });
    throw invalid(`${at} is an unknown action: give factory:<Resource>:<Verb> names of the factory surface (GET /api/v1/factory-services/{id}/policy shows the current list)`, { type: 'policy-action-unknown' });
  });
  return [...new Set(allow)].sort();
}
