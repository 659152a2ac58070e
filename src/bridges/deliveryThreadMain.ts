/**
 * Inside the delivery thread: deliveries asked by the main thread (deliveryThread.ts), each rule's
 * sink connection held here. Deliveries of different rules run side by side; each answers once.
 */
import { parentPort } from 'node:worker_threads';
import { DeliveryError, InlineDelivery } from './delivery.js';
import type { ThreadReply, ThreadRequest } from './deliveryThread.js';

const delivery = new InlineDelivery();
const port = parentPort!;

port.on('message', (m: ThreadRequest) => {
  const work = m.op === 'deliver' ? delivery.deliver(m.rule, m.input) : m.op === 'close' ? delivery.close(m.runner).then(() => 0) : delivery.stop().then(() => 0);
  // the telemetry's memory goes back with the answer, for the main thread's next read (BufferPool)
  const points = m.op === 'deliver' && 'telemetry' in m.input ? m.input.telemetry.points.buffer as ArrayBuffer : undefined;
  const reply = (r: ThreadReply) => port.postMessage(points ? { ...r, points } : r, points ? [points] : []);
  work.then(
    (value) => reply({ id: m.id, ok: true, value }),
    (err: unknown) => reply({ id: m.id, ok: false, error: err instanceof Error ? err.message : String(err), events: err instanceof DeliveryError ? err.events : undefined }),
  );
});
