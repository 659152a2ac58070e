import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { devicePublishAllowed, ownTopicKind, parseDeviceTopic, topicAllowed, TOPICS } from '../../src/broker/topics.js';

// The ACL runs on every message without building strings; these pin it to the plain definition.
const reference = (id: string, topic: string) => topic.startsWith(`devices/${id}/`) && topic.length > `devices/${id}/`.length && !topic.includes('\0');

describe('device topic ACL', () => {
  it('allows exactly the topics under devices/{clientId}/', () => {
    const id = 'a1b2';
    expect(topicAllowed(id, `devices/${id}/telemetry`)).toBe(true);
    expect(topicAllowed(id, `devices/${id}/#`)).toBe(true);
    expect(topicAllowed(id, `devices/${id}`)).toBe(false);
    expect(topicAllowed(id, `devices/${id}/`)).toBe(false);
    expect(topicAllowed(id, `devices/a1b/telemetry`)).toBe(false);
    expect(topicAllowed(id, `devices/a1b2x/telemetry`)).toBe(false);
    expect(topicAllowed(id, `devices/+/telemetry`)).toBe(false);
    expect(topicAllowed(id, `devices/${id}/x\0y`)).toBe(false);
    expect(topicAllowed(id, `Devices/${id}/telemetry`)).toBe(false);
  });

  it('matches the plain definition for any client id and topic', () => {
    const word = fc.stringMatching(/^[a-z0-9/+#\0-]{0,12}$/);
    fc.assert(fc.property(word, word, fc.boolean(), (id, rest, own) => {
      const topic = own ? `devices/${id}/${rest}` : rest;
      expect(topicAllowed(id, topic)).toBe(reference(id, topic));
    }), { numRuns: 2000 });
  });

  it('names the kind of a device topic and refuses gateway-owned ones to devices', () => {
    const id = 'dev-1';
    for (const [kind, t] of Object.entries(TOPICS)) {
      expect(ownTopicKind(id, `devices/${id}/${t.suffix}`)).toBe(kind);
      expect(parseDeviceTopic(`devices/${id}/${t.suffix}`)).toEqual({ thingId: id, kind });
      expect(devicePublishAllowed(id, `devices/${id}/${t.suffix}`)).toBe(t.from === 'device');
    }
    expect(ownTopicKind(id, `devices/${id}/telemetry/extra`)).toBe('other');
    expect(ownTopicKind(id, `devices/${id}/xtelemetry`)).toBe('other');
    expect(ownTopicKind(id, `devices/other/telemetry`)).toBeUndefined();
    expect(devicePublishAllowed(id, `devices/${id}/custom/level`)).toBe(true);
    expect(devicePublishAllowed(id, `devices/other/telemetry`)).toBe(false);
  });
});
