import type { ActorKind } from '../actors/store.js';
import { registrarMachine } from '../../machines/registrar.js';
import { accessRequestMachine } from '../../machines/accessRequest.js';
import { factoryRegistrationMachine } from '../../machines/factoryRegistration.js';
import { eligibilityGrantMachine } from '../../machines/eligibilityGrant.js';
import { referenceRequestMachine } from '../../machines/referenceRequest.js';

/** The registry's lifecycles; each projects its state and decision onto its own row. */
export const registrarKind: ActorKind<typeof registrarMachine> = {
  type: 'registrar', machine: registrarMachine, accountOf: (c) => c.accountId,
  projection: {
    table: 'registrars',
    columns: ['state', 'canonical_model_id', 'decided_at', 'decided_by', 'reason'],
    // a deleted registrar lets go of its model (the model may then be deleted)
    project: ({ context: c }, state) => ({ state, canonical_model_id: state === 'DELETED' ? null : c.canonicalModelId, decided_at: c.decidedAt, decided_by: c.decidedBy, reason: c.reason }),
  },
};

export const accessRequestKind: ActorKind<typeof accessRequestMachine> = {
  type: 'accessRequest', machine: accessRequestMachine, accountOf: (c) => c.ownerAccountId,
  projection: {
    table: 'access_requests',
    columns: ['state', 'decided_at', 'decided_by', 'reason'],
    project: ({ context: c }, state) => ({ state, decided_at: c.decidedAt, decided_by: c.decidedBy, reason: c.reason }),
  },
};

/** actor id = the account id */
export const factoryRegistrationKind: ActorKind<typeof factoryRegistrationMachine> = {
  type: 'factoryRegistration', machine: factoryRegistrationMachine, accountOf: (c) => c.accountId,
  projection: {
    table: 'factory_registrations', key: 'account_id',
    columns: ['state', 'note', 'requested_at', 'requested_by', 'decided_at', 'decided_by', 'reason'],
    project: ({ context: c }, state) => ({
      state, note: c.note, requested_at: c.requestedAt, requested_by: c.requestedBy, decided_at: c.decidedAt, decided_by: c.decidedBy, reason: c.reason,
    }),
  },
};

export const eligibilityGrantKind: ActorKind<typeof eligibilityGrantMachine> = {
  type: 'eligibilityGrant', machine: eligibilityGrantMachine, accountOf: (c) => c.ownerAccountId,
  projection: {
    table: 'eligibility_grants',
    columns: ['state', 'decided_at', 'decided_by', 'reason'],
    project: ({ context: c }, state) => ({ state, decided_at: c.decidedAt, decided_by: c.decidedBy, reason: c.reason }),
  },
};

export const referenceRequestKind: ActorKind<typeof referenceRequestMachine> = {
  type: 'referenceRequest', machine: referenceRequestMachine, accountOf: (c) => c.ownerAccountId,
  projection: {
    table: 'reference_requests',
    columns: ['state', 'decided_at', 'decided_by', 'reason', 'revoked_at'],
    project: ({ context: c }, state) => ({ state, decided_at: c.decidedAt, decided_by: c.decidedBy, reason: c.reason, revoked_at: c.revokedAt }),
  },
};

export const registryKinds = [registrarKind, accessRequestKind, factoryRegistrationKind, eligibilityGrantKind, referenceRequestKind];
