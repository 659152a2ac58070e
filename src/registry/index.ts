import { defineDomain } from '../gateway.js';
import type { StoredEvent } from '../actors/store.js';
import { Listening } from '../lib/listening.js';
import { AccessRequests } from './accessRequests.js';
import { DeviceDeeplinks } from './deeplinks.js';
import { Eligibility } from './eligibility.js';
import { FactoryRegistrations } from './factoryRegistrations.js';
import { registryKinds } from './kinds.js';
import { RECONCILE_JOB, References } from './references.js';
import { Registrars } from './registrars.js';
import { registryRoutes } from './routes.js';
import type { Vendors } from './vendors.js';
import { registrarsOfModel } from './repo.js';

/** Which registrars an account may name for its factory services. */
export interface RegistrarDirectory {
  /** its own APPROVED registrar, or another account's APPROVED one its access request to was APPROVED */
  mayActFor(accountId: string, registrarId: string): Promise<boolean>;
}

declare module '../gateway.js' {
  interface Services {
    registrarDirectory: RegistrarDirectory;
  }
}

export interface RegistryServices {
  vendors: Vendors;
  registrars: Registrars;
  accessRequests: AccessRequests;
  factoryRegistrations: FactoryRegistrations;
  eligibility: Eligibility;
  references: References;
  deeplinks: DeviceDeeplinks;
}

/**
 * Domain module of src/registry/: vendors, registrars, access requests, factory registrations,
 * eligibility artifacts and grants, reference requests with their thing references, device deeplinks.
 */
export const registryDomain = defineDomain({
  name: 'registry',
  provides: ['registrarDirectory'],
  requires: ['models', 'vendorNamespaces'],
  kinds: registryKinds,
  init(gw, { models, vendorNamespaces: vendors }) {
    const { sql, actors, clock, log } = gw;
    const publicBaseUrl = gw.config.PUBLIC_BASE_URL;
    // a model that is a registrar's canonical model cannot be deleted: trust's 409 counts them through us
    models.referencedBy('registrars', (modelId) => registrarsOfModel(sql, modelId));
    const references = new References({ sql, actors, clock, log });
    const parts: RegistryServices = {
      vendors,
      registrars: new Registrars({ sql, actors, clock, log }),
      accessRequests: new AccessRequests({ sql, actors, clock }),
      factoryRegistrations: new FactoryRegistrations({ sql, actors, clock }),
      eligibility: new Eligibility({ sql, actors, clock, publicBaseUrl }),
      references,
      deeplinks: new DeviceDeeplinks({ sql, clock, publicBaseUrl }),
    };
    gw.jobs.define(RECONCILE_JOB, async () => { await references.sweep(); }, { schedule: '* * * * *', retryLimit: 1 });
    // every node hears every thing.enrolled; the reconcile is idempotent, the sweep catches what is missed
    const enrolled = new Listening(gw.bus, ['thing.enrolled'], (ev: StoredEvent) => references.enrolled(ev.actorId));
    return { registrarDirectory: parts.registrars, parts, enrolled };
  },
  async routes(app, _gw, { parts }) {
    await registryRoutes(app, parts);
  },
  async start(gw, { parts, enrolled }) {
    enrolled.start();
    parts.references.sweep().catch((err) => gw.log.error({ err }, 'reference sweep at start failed'));
  },
  async stop(_gw, { parts, enrolled }) {
    enrolled.stop();
    await parts.references.flush();
  },
});
