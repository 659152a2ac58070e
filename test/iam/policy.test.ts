import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { evaluateScps, matches, normalizeScpDocument, type AttachedScp, type ScpStatement } from '../../src/iam/policy.js';
import { scpDocumentSchema } from '../../src/iam/schemas.js';

const segment = fc.stringMatching(/^[A-Za-z][A-Za-z0-9]{0,9}$/);
const action = fc.tuple(segment, segment, segment).map(([s, r, v]) => `${s}:${r}:${v}`);
const randomCase = (s: string, flips: boolean[]) => [...s].map((ch, i) => (flips[i % flips.length] ? ch.toUpperCase() : ch.toLowerCase())).join('');

const scp = (id: string, statements: ScpStatement[]): AttachedScp => ({ id, name: id, document: { Version: '2012-10-17', Statement: statements } });
const deny = (Action: string | string[]): ScpStatement => ({ Effect: 'Deny', Action, Resource: '*' });
const allow = (Action: string | string[]): ScpStatement => ({ Effect: 'Allow', Action, Resource: '*' });

describe('SCP matching (property-based)', () => {
  it('an exact action pattern matches itself in any letter case', () => {
    fc.assert(fc.property(action, fc.array(fc.boolean(), { minLength: 1 }), (a, flips) => {
      expect(matches(randomCase(a, flips), a)).toBe(true);
      expect(evaluateScps([scp('p', [deny(randomCase(a, flips))])], a)).toBeDefined();
    }));
  });

  it('"*", "<service>:*" and "<service>:<Resource>:*" match every action below them', () => {
    fc.assert(fc.property(action, (a) => {
      const [s, r] = a.split(':');
      for (const p of ['*', `${s}:*`, `${s}:${r}:*`, `${s}:*:*`, `*:${r}:*`, `${s.toUpperCase()}:*`]) expect(matches(p, a)).toBe(true);
    }));
  });

  it('a wildcard pattern built from an action by replacing any substring with * matches it; ? matches one character', () => {
    fc.assert(fc.property(action, fc.nat(), fc.nat(), (a, i, j) => {
      const start = i % a.length;
      const end = start + (j % (a.length - start + 1));
      expect(matches(a.slice(0, start) + '*' + a.slice(end), a)).toBe(true);
      expect(matches(a.slice(0, start) + '?' + a.slice(start + 1), a)).toBe(true);
    }));
  });

  it('a pattern for another service or verb does not match', () => {
    fc.assert(fc.property(action, action, (a, b) => {
      fc.pre(a.toLowerCase() !== b.toLowerCase());
      expect(matches(a, b)).toBe(false);
      const [s, r, v] = b.split(':');
      expect(matches(`${s}:${r}:${v}x`, b)).toBe(false);
      expect(matches(`x${s}:*`, b)).toBe(false);
    }));
  });

  it('several statements and several SCPs: denied iff some Deny statement of some SCP matches; Allow never grants or overrides', () => {
    const pattern = fc.oneof(action, action.map((a) => a.split(':').slice(0, 2).join(':') + ':*'), action.map((a) => a.split(':')[0] + ':*'), fc.constant('*'));
    const statement = fc.record({ Effect: fc.constantFrom('Allow' as const, 'Deny' as const), Action: fc.array(pattern, { minLength: 1, maxLength: 4 }), Resource: fc.constant('*') });
    const policies = fc.array(fc.array(statement, { minLength: 1, maxLength: 4 }), { minLength: 0, maxLength: 5 });
    fc.assert(fc.property(policies, action, (docs, a) => {
      const scps = docs.map((st, i) => scp(`p${i}`, st));
      const expected = docs.some((st) => st.some((s) => s.Effect === 'Deny' && s.Action.some((p) => matches(p, a))));
      const result = evaluateScps(scps, a);
      expect(result !== undefined).toBe(expected);
      if (result) {
        expect(result.statement.Effect).toBe('Deny');
        // the first denying policy in attachment order is reported
        const first = docs.findIndex((st) => st.some((s) => s.Effect === 'Deny' && s.Action.some((p) => matches(p, a))));
        expect(result.scp.id).toBe(`p${first}`);
      }
      // adding Allow statements for the action changes nothing
      expect(evaluateScps([...scps, scp('allow', [allow(a), allow('*')])], a) !== undefined).toBe(expected);
    }));
  });

  it('no SCP, or only Allow statements: no restriction', () => {
    fc.assert(fc.property(action, (a) => {
      expect(evaluateScps([], a)).toBeUndefined();
      expect(evaluateScps([scp('p', [allow('*'), allow(a)])], a)).toBeUndefined();
    }));
  });

  it('a single Statement object and a single Action string work like one-element arrays', () => {
    fc.assert(fc.property(action, (a) => {
      const single: AttachedScp = { id: 's', name: 's', document: { Version: '2012-10-17', Statement: { Effect: 'Deny', Action: a, Resource: '*' } } };
      expect(evaluateScps([single], a)).toBeDefined();
    }));
  });

  it('regex metacharacters in patterns are literal', () => {
    expect(matches('iam:Cred.ntial:Create', 'iam:Credential:Create')).toBe(false);
    expect(matches('iam:(.*)', 'iam:x')).toBe(false);
  });

  it('document validation accepts the spec shape and refuses others', () => {
    const valid = (d: unknown) => scpDocumentSchema.safeParse(normalizeScpDocument(d)).success;
    expect(valid({ Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['things:Thing:Create'], Resource: '*' }] })).toBe(true);
    expect(valid({ Version: '2012-10-17', Statement: { Effect: 'Deny', Action: 'things:*', Resource: '*' } })).toBe(true);
    for (const bad of [
      { Statement: [] },
      { Version: 'v1', Statement: [{ Effect: 'Deny', Action: ['a:b:c'], Resource: '*' }] },
      { Version: '2012-10-17', Statement: [] },
      { Version: '2012-10-17', Statement: [{ Effect: 'deny', Action: ['a:b:c'], Resource: '*' }] },
      { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['a b'], Resource: '*' }] },
      { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: [], Resource: '*' }] },
      { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['a:b:c:d'], Resource: '*' }] },
      { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['a:b:c'] }] },
      { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['a:b:c'], Resource: '*', Condition: {} }] },
    ]) expect(valid(bad)).toBe(false);
  });
});
