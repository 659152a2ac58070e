import type { MqttClient, IPublishPacket } from 'mqtt';

/** What a simulated device does with an OTA update action (`devices/{id}/ota/update`). */
export interface OtaBehaviour {
  /** does this device's update fail? (the simulator: at random with --ota-fail-rate) */
  fails(thingId: string, action: { action_id: string; version: string }): boolean;
  /** milliseconds between two reports (0: all at once) */
  stepMs?: number;
  /** each applied update, with its outcome */
  onApplied?(thingId: string, ok: boolean): void;
  /** an update message that did not parse */
  onError?(thingId: string, err: Error): void;
}

export const otaTopics = (thingId: string) => ({ update: `devices/${thingId}/ota/update`, status: `devices/${thingId}/ota/status` });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Makes a connected device take part in OTA rollouts: it subscribes to its update topic and, for
 * each new action, reports received, downloading (50 %, 100 %), installing, then succeeded or
 * failed, echoing the action's correlation data (MQTT 5). An action seen before (sent again on
 * reconnect) is reported again from where it stands, never applied twice.
 */
export async function joinOta(client: MqttClient, thingId: string, behaviour: OtaBehaviour): Promise<void> {
  const topics = otaTopics(thingId);
  const outcomes = new Map<string, boolean>();
  client.on('message', (topic: string, payload: Buffer, packet: IPublishPacket) => {
    if (topic !== topics.update) return;
    let action: { action_id: string; version: string };
    try {
      action = JSON.parse(payload.toString());
      if (typeof action.action_id !== 'string') throw new Error('no action_id');
    } catch (err) {
      behaviour.onError?.(thingId, err as Error);
      return;
    }
    const correlationData = packet.properties?.correlationData;
    const report = (body: Record<string, unknown>) =>
      client.publishAsync(topics.status, JSON.stringify({ action_id: action.action_id, ...body }), { qos: 1, properties: correlationData ? { correlationData } : undefined });
    const known = outcomes.get(action.action_id);
    if (known !== undefined) {
      void report(known ? { status: 'succeeded' } : { status: 'failed', reason: 'checksum mismatch (simulated)' }).catch(() => {});
      return;
    }
    const ok = !behaviour.fails(thingId, action);
    outcomes.set(action.action_id, ok);
    void (async () => {
      const step = behaviour.stepMs ?? 0;
      for (const body of [{ status: 'received' }, { status: 'downloading', progress: 50 }, { status: 'downloading', progress: 100 }, { status: 'installing' }]) {
        await report(body);
        if (step) await sleep(step);
      }
      await report(ok ? { status: 'succeeded' } : { status: 'failed', reason: 'checksum mismatch (simulated)' });
      behaviour.onApplied?.(thingId, ok);
    })().catch((err) => behaviour.onError?.(thingId, err as Error));
  });
  await client.subscribeAsync(topics.update, { qos: 1 });
}
