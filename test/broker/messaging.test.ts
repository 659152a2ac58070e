import { describe, expect, it } from 'vitest';
import { receives } from '../../src/broker/messaging.js';
import { devicePublishAllowed, parseDeviceTopic } from '../../src/broker/topics.js';

describe('deviceMessaging topics', () => {
  it('a subscription receives the OTA update topic when its filter covers devices/{id}/ota/update', () => {
    for (const f of ['devices/t1/ota/update', 'devices/t1/#', 'devices/t1/ota/#', 'devices/t1/+/update', 'devices/t1/ota/+', 'devices/t1/+/+']) expect(receives('t1', 'otaUpdate', f), f).toBe(true);
    for (const f of ['devices/t1/ota/status', 'devices/t1/ota', 'devices/t1/+', 'devices/t2/ota/update', 'devices/t1/ota/update/x', 'devices/t10/#']) expect(receives('t1', 'otaUpdate', f), f).toBe(false);
  });

  it('devices publish their status but not on their update topic', () => {
    expect(devicePublishAllowed('t1', 'devices/t1/ota/status')).toBe(true);
    expect(devicePublishAllowed('t1', 'devices/t1/ota/update')).toBe(false);
    expect(devicePublishAllowed('t1', 'devices/t2/ota/status')).toBe(false);
    expect(parseDeviceTopic('devices/t1/ota/status')).toEqual({ thingId: 't1', kind: 'otaStatus' });
  });
});
