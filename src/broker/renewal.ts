import type { AedesPublishPacket, Client } from 'aedes';
import { z } from 'zod';
import type { CertificateRenewal, Gateway } from '../gateway.js';
import { DomainError } from '../lib/errors.js';
import { clientCertificate, type Broker } from './broker.js';
import { deviceTopic, ownTopicKind, TOPICS } from './topics.js';

const RENEW_SUFFIX = `/${TOPICS.certificateRenew.suffix}`;

const request = z.strictObject({
  csr: z.string().min(1).max(16_384),
  requestId: z.string().min(1).max(128).optional(),
});

/** What the device gets back: the new certificate, or `error` (no HTTP status: `kind` names the failure). */
export type RenewalReply =
  | { requestId?: string; thingId: string; certificate: string; serial: string; notAfter: string; caCertificate: string; caBundlePem: string }
  | { requestId?: string; error: { kind: string; type?: string; detail: string; retryAfterSeconds?: number } };

/**
 * Certificate renewal over MQTT (issue 18, item 4): a connected device publishes `{ csr, requestId? }`
 * on `devices/{id}/certificate/renew` and gets the answer on the MQTT 5 response topic it named
 * (under its own prefix; correlation data echoed), else on `devices/{id}/certificate/renewed`
 * (`requestId` echoed, for MQTT 3.1.1). The rules are trust's (`certificateRenewal`), the same as
 * the HTTP route's. Only this node's clients are handled (Aedes' `publish` event), so one request
 * is answered once in a cluster; one renewal per device runs at a time.
 */
export class MqttRenewal {
  private readonly inFlight = new Set<string>();
  private off?: () => void;

  constructor(private readonly gw: Gateway, private readonly renewal: CertificateRenewal) {}

  /** Answers the renewal requests of the devices connected to `broker` until stop. */
  start(broker: Broker): void {
    const onPublish = (packet: AedesPublishPacket, client: Client | null) => {
      // every device publish on this node passes here: one endsWith for the others
      if (client && packet.topic.endsWith(RENEW_SUFFIX) && ownTopicKind(client.id, packet.topic) === 'certificateRenew') this.receive(broker, packet, client);
    };
    broker.aedes.on('publish', onPublish);
    this.off = () => void broker.aedes.off('publish', onPublish);
  }

  stop(): void {
    this.off?.();
  }

  private receive(broker: Broker, packet: AedesPublishPacket, client: Client): void {
    const thingId = client.id;
    const props = (packet as { properties?: { responseTopic?: string; correlationData?: Buffer } }).properties;
    const to = { topic: replyTopic(thingId, props?.responseTopic), correlationData: props?.correlationData };
    let body: z.infer<typeof request>;
    try {
      body = request.parse(JSON.parse(Buffer.from(packet.payload).toString('utf8')));
    } catch {
      return this.send(broker, to, { error: { kind: 'invalid', detail: 'the payload must be a JSON object {"csr": "<PEM PKCS#10>", "requestId"?: "<echoed>"}' } });
    }
    const echo = body.requestId === undefined ? {} : { requestId: body.requestId };
    if (this.inFlight.has(thingId)) {
      return this.send(broker, to, { ...echo, error: { kind: 'too_many', type: 'renewal-in-progress', detail: 'a renewal of this device is in progress; wait for its answer' } });
    }
    this.inFlight.add(thingId);
    // no serial matches no certificate: refused
    void this.renewal.renew(thingId, body.csr, clientCertificate(client)?.serial ?? '')
      .then((renewed): RenewalReply => ({ ...echo, ...renewed }), (err: unknown): RenewalReply => ({ ...echo, error: errorOf(err, this.gw, thingId) }))
      .then((reply) => this.send(broker, to, reply))
      .finally(() => this.inFlight.delete(thingId));
  }

  private send(broker: Broker, to: { topic: string; correlationData?: Buffer }, reply: RenewalReply): void {
    broker.publish({
      topic: to.topic, payload: JSON.stringify(reply), qos: 1,
      properties: { contentType: 'application/json', ...(to.correlationData ? { correlationData: to.correlationData } : {}) },
    }).catch((err) => this.gw.log.error({ err, topic: to.topic }, 'certificate renewal answer not published'));
  }
}

/** The MQTT 5 response topic when it is the device's own and not one the gateway uses otherwise; else the fixed one. */
function replyTopic(thingId: string, responseTopic: string | undefined): string {
  const kind = responseTopic && !/[+#\0]/.test(responseTopic) ? ownTopicKind(thingId, responseTopic) : undefined;
  return kind === 'other' || kind === 'certificateRenewed' ? responseTopic! : deviceTopic(thingId, 'certificateRenewed');
}

function errorOf(err: unknown, gw: Gateway, thingId: string): Extract<RenewalReply, { error: unknown }>['error'] {
  if (err instanceof DomainError && err.kind !== 'internal') {
    const { type, retryAfterSeconds } = err.options;
    return { kind: err.kind, ...(type ? { type } : {}), detail: err.detail, ...(retryAfterSeconds !== undefined ? { retryAfterSeconds: Math.ceil(retryAfterSeconds) } : {}) };
  }
  gw.log.error({ err, thingId }, 'certificate renewal over MQTT failed');
  return { kind: 'internal', detail: 'the certificate could not be renewed; retry later' };
}
