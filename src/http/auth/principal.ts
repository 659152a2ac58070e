export const ACCOUNT_ROLES = ['admin', 'operator', 'viewer'] as const;
export const PLATFORM_ROLES = ['platform-admin', 'platform-operator'] as const;
/** The role of a factory service's signed requests (its account's, scoped to its model). */
export const FACTORY_SERVICE_ROLE = 'factory-service';
export type AccountRole = (typeof ACCOUNT_ROLES)[number];
export type PlatformRole = (typeof PLATFORM_ROLES)[number];

export type RealmKind = 'acc' | 'idc' | 'platform' | 'service' | 'device' | 'internal';

/** Who is calling: set on `request.principal` by authentication, read by every route. */
export interface Principal {
  /** JWT bearer or SVC access-key credential; a factory service's SVC-HMAC-SHA256 signed request; a device (enrollment token or client certificate); an internal caller (shared secret) */
  via: 'jwt' | 'credential' | 'factory-service' | 'device' | 'internal';
  /** identity-provider user id (`sub`), or the credential's principal_id */
  sub: string;
  realm: string;
  realmKind: RealmKind;
  /** the account this request acts on (acc-* realm, credential's account, or idc assignment) */
  accountId?: string;
  roles: string[];
  email?: string;
  /** set when authenticated by an access key */
  credential?: { id: string; accessKeyId: string; temporary: boolean };
  /** set when a device authenticated (`via: 'device'`): the thing it is, and how it proved it */
  device?: { thingId: string; credential: 'enrollment-token' | 'client-certificate' };
  /**
   * set for signed requests: the factory service that signed, and its policy (the actions it may
   * call; `policy` says whether that is its role's default or the list an account admin set)
   */
  factoryService?: {
    id: string; accessKeyId: string; role: string; modelId: string; registrarId: string | null;
    allow: readonly string[]; policy: 'default' | 'custom';
  };
  /** the raw verified JWT claims (jwt only) */
  claims?: Record<string, unknown>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (s: string) => UUID.test(s);

/** `acc-<uuid>` | `idc-<name>` | `platform`; anything else is not a realm we serve. */
export function parseRealm(realm: string): { kind: RealmKind; accountId?: string } | undefined {
  if (realm === 'platform') return { kind: 'platform' };
  if (realm.startsWith('acc-') && isUuid(realm.slice(4))) return { kind: 'acc', accountId: realm.slice(4).toLowerCase() };
  if (/^idc-[A-Za-z0-9._-]{1,64}$/.test(realm)) return { kind: 'idc' };
  return undefined;
}

/** A device's principal: no realm, no roles; routes reach it only through `{ schemes: [...] }` access. */
export function devicePrincipal(thingId: string, credential: 'enrollment-token' | 'client-certificate'): Principal {
  return { via: 'device', sub: thingId, realm: 'device', realmKind: 'device', roles: [], device: { thingId, credential } };
}
