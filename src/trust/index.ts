import { defineDomain, type RenewedCertificate } from '../gateway.js';
import { CrlService } from './crl.js';
import { DdiService } from './ddi.js';
import { EnrollmentService } from './enrollment.js';
import { ModelService } from './models.js';
import { modelRoutes } from './model-routes.js';
import { registryRoutes } from './registry-routes.js';
import { RegistryService, thingSearch } from './registry.js';
import { deviceAuthenticators, trustRoutes } from './routes.js';
import { resealAll, Sealer, type SealedColumn } from '../pki/sealer.js';
import { TrustService } from './service.js';
import { ThingLifecycleService } from './lifecycle.js';
import { FactoryEnrollments } from './enrollments.js';
import { accessCodeKind, claimGroupKind, deviceCertificateKind, enrollmentTokenKind, licenseKind, thingKind } from './kinds.js';
import { revokeBlacklisted } from './blacklisted.js';
import { CertificateRotation, rotationRoutes } from './rotation.js';
import { CERTIFICATE_EXPIRY_JOB, CertificateExpiryWarnings } from './expiryWarnings.js';
import { FirstUseFilter } from './firstUse.js';

export interface TrustServices {
  trust: TrustService;
  models: ModelService;
  enrollment: EnrollmentService;
  ddi: DdiService;
  crl: CrlService;
  lifecycle: ThingLifecycleService;
  enrollments: FactoryEnrollments;
  rotation: CertificateRotation;
}

declare module '../gateway.js' {
  interface Services {
    trust: TrustService;
    models: ModelService;
    enrollment: EnrollmentService;
    thingLifecycle: ThingLifecycleService;
  }
}

/** What tests of trust trigger or observe below its public interface (RunningGateway.testHooks.trust). */
export interface TrustTestHooks {
  /** one run of the hourly claim-group expiry job now; returns how many groups it expired */
  expireClaimGroups(): Promise<number>;
  /** one run of the hourly CRL refresh job now (re-signs a CRL getting old) */
  refreshCrlIfOld(): Promise<void>;
  /** the number of the CRL this node serves (the CRL route gives the DER, tests compare numbers) */
  crlNumber(): Promise<number>;
  /** the owner other domains are told (thingDirectory), also for ids no route accepts (the broker asks with any client id) */
  accountOf(thingId: string): Promise<string | undefined>;
  /** a renewal as MQTT asks it (certificateRenewal), with the serial the session presented, without an MQTT session */
  renew(thingId: string, csr: string, presented?: string): Promise<RenewedCertificate>;
  /** what the broker reports on an accepted CONNECT (certificateUse), at a moment the test chooses */
  certificateUsed(thingId: string, serial: string, notBefore?: Date): Promise<void>;
  /** the first-use filter's periodic reload now (which certificates await their first use) */
  reloadFirstUse(): Promise<void>;
}

declare module '../gateway.js' {
  interface TestHooks {
    trust: TrustTestHooks;
  }
}

/** The trust domain's sealed columns (re-sealed at start after a sealing-key rotation). */
const SEALED_COLUMNS: SealedColumn[] = [
  { table: 'models', key: 'id', column: 'provisioning_secret' },
  { table: 'device_certificates', key: 'serial', column: 'sealed_private_key' },
];

/** Domain module of src/trust/: PKI services, models, things, claim groups, enrollment, revocation. */
export const trustDomain = defineDomain({
  name: 'trust',
  provides: ['trust', 'models', 'enrollment', 'crl', 'thingDirectory', 'thingLifecycle', 'certificateUse', 'certificateRenewal', 'thingSearch'],
  requires: ['deviceSessions', 'mqttEndpoint', 'blacklist', 'vendorNamespaces'],
  kinds: [claimGroupKind, enrollmentTokenKind, thingKind, licenseKind, deviceCertificateKind, accessCodeKind],
  init(gw, { deviceSessions, mqttEndpoint, blacklist, vendorNamespaces }) {
    const sealer = new Sealer(gw.pki.sealingKeys);
    const crl = new CrlService(gw);
    const models = new ModelService(gw.sql, sealer, vendorNamespaces, gw.config.PUBLIC_BASE_URL);
    const trust = new TrustService(gw, crl, models, deviceSessions);
    const enrollment = new EnrollmentService(gw, models, sealer, mqttEndpoint, blacklist);
    const rotation = new CertificateRotation(gw, crl, deviceSessions);
    const services: TrustServices = {
      trust, models, crl, enrollment, ddi: new DdiService(gw, rotation), lifecycle: new ThingLifecycleService(gw, trust), enrollments: new FactoryEnrollments(gw.sql, models, enrollment),
      rotation,
    };
    const certificateUse = new FirstUseFilter(gw, services.rotation);
    blacklist.onAdded((identity) => revokeBlacklisted(gw, trust, identity));
    // devices authenticate through the auth hook (routes declare { schemes: ['device-token', 'device-cert'] })
    for (const [name, authenticator] of Object.entries(deviceAuthenticators(gw, services.ddi))) gw.auth.registerAuthenticator(name, authenticator);
    gw.jobs.define('trust.crl-refresh', () => crl.refreshIfOld(), { schedule: '17 * * * *' });
    const expiry = new CertificateExpiryWarnings(gw);
    // daily (idempotent: each certificate is warned of once)
    gw.jobs.define(CERTIFICATE_EXPIRY_JOB, async () => { await expiry.run(); }, { schedule: '37 3 * * *', retryLimit: 3 });
    gw.jobs.define('trust.claim-group-expiry', async () => { await trust.expireClaimGroups(); }, { schedule: '7 * * * *' });
    const testHooks: TrustTestHooks = {
      expireClaimGroups: () => trust.expireClaimGroups(),
      refreshCrlIfOld: () => crl.refreshIfOld(),
      crlNumber: async () => (await crl.current()).number,
      accountOf: (thingId) => trust.accountOf(thingId),
      renew: (thingId, csr, presented) => rotation.renew(thingId, csr, presented),
      certificateUsed: (thingId, serial, notBefore) => certificateUse.used(thingId, serial, notBefore),
      reloadFirstUse: () => certificateUse.reload(),
    };
    return {
      trust, models, enrollment, crl, thingDirectory: trust, thingLifecycle: services.lifecycle, certificateUse,
      certificateRenewal: services.rotation, thingSearch: thingSearch(new RegistryService(gw.sql, gw.actors, gw.clock)),
      // own state, for the hooks below only
      trustServices: services, sealer, testHooks,
    };
  },
  async routes(app, gw, { trustServices }) {
    await trustRoutes(app, gw, trustServices);
    await modelRoutes(app, trustServices.models, gw.clock);
    await registryRoutes(app, gw);
    await rotationRoutes(app, trustServices.rotation);
  },
  async start(gw, { crl, certificateUse, sealer }) {
    await crl.current();
    await certificateUse.start();
    // values sealed with the legacy or a rotated-out key move to the current one
    const sealed = await resealAll(gw.sql, sealer, SEALED_COLUMNS);
    if (sealed.unreadable) gw.log.warn(sealed, 'some sealed values open with no sealing key');
    else if (sealed.resealed) gw.log.info(sealed, 'sealed values moved to the current sealing key');
  },
  async stop(_gw, { certificateUse }) {
    certificateUse.stop();
  },
});
