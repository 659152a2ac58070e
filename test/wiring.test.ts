import { describe, expect, it } from 'vitest';
import { defineDomain, type Gateway, type MqttEndpoint } from '../src/gateway.js';
import { servicesOf, wireDomains, WiringError } from '../src/wiring.js';

// the domains here use nothing of the gateway: wiring only hands it to their init
const gw = {} as Gateway;
const endpoint: MqttEndpoint = { port: 1883 };

describe('domain wiring: a domain state lives in what its init returns', () => {
  it("gives a domain's own hooks everything its init returned, and other domains only its declared provides", async () => {
    const calls: string[] = [];
    const counter = { started: 0 };
    const provider = defineDomain({
      name: 'provider',
      provides: ['mqttEndpoint'],
      init: () => ({ mqttEndpoint: endpoint, counter, secret: 'internal' }),
      async start(_gw, { counter: own, secret }) {
        own.started += 1;
        calls.push(`start ${secret}`);
      },
    });
    const user = defineDomain({
      name: 'user',
      requires: ['mqttEndpoint'],
      init: (_gw, { mqttEndpoint }) => ({ seen: mqttEndpoint.port }),
    });
    const wired = await wireDomains([provider, user], gw);
    expect(wired.services).toStrictEqual({ mqttEndpoint: endpoint });
    await provider.start!(gw, servicesOf(provider, wired));
    expect(counter.started).toBe(1);
    expect(calls).toEqual(['start internal']);
    const userView = servicesOf(user, wired) as unknown as Record<string, unknown>;
    expect(userView.seen).toBe(1883);
    expect(userView.mqttEndpoint).toBe(endpoint);
    // the provider's state is not a service: the other domain cannot reach it
    expect(() => userView.counter).toThrow(WiringError);
    expect(() => userView.deviceSessions).toThrow(/domain 'user' used service 'deviceSessions' without declaring it in requires/);
  });

  it('a domain whose init returns exactly its provides (no own state) works as before', async () => {
    const plain = defineDomain({ name: 'plain', provides: ['mqttEndpoint'], init: () => ({ mqttEndpoint: endpoint }) });
    const none = defineDomain({ name: 'none' });
    const wired = await wireDomains([plain, none], gw);
    expect(servicesOf(plain, wired).mqttEndpoint).toBe(endpoint);
    expect(wired.own.get(none)).toEqual({});
  });

  it('collects the test hooks each domain returns, by domain name', async () => {
    const hooks = { ping: () => 'pong' };
    const d = defineDomain({ name: 'hooked', init: () => ({ testHooks: hooks }) });
    const wired = await wireDomains([d, defineDomain({ name: 'unhooked' })], gw);
    expect(wired.testHooks).toEqual({ hooked: hooks });
  });

  it('refuses an init that leaves out a declared service', async () => {
    const d = defineDomain({ name: 'forgetful', provides: ['mqttEndpoint'], init: () => ({ state: 1 }) as never });
    await expect(wireDomains([d], gw)).rejects.toThrow("domain 'forgetful' declares provides [mqttEndpoint] but its init returned no 'mqttEndpoint'");
  });

  it("refuses own state named like another domain's service (it would shadow the service in its view)", async () => {
    const provider = defineDomain({ name: 'provider', provides: ['mqttEndpoint'], init: () => ({ mqttEndpoint: endpoint }) });
    // a type error as well (NoOtherService in src/gateway.ts); the cast shows the check at start-up
    const shadow = defineDomain({ name: 'shadow', requires: ['mqttEndpoint'], init: () => ({ mqttEndpoint: { port: 1 } }) as never });
    await expect(wireDomains([provider, shadow], gw)).rejects.toThrow("domain 'shadow' returned 'mqttEndpoint' from init, the name of a service of domain 'provider'");
  });
});
