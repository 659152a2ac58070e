/**
 * Child process of disconnect.test.ts (a client in another process sees the server's TCP behaviour
 * as a device would; in the test's own event loop the race does not show). Reads
 * `{ port, burst, devices }` on stdin; every device connects (MQTT 5 and 3.1.1 alternately), sends
 * `burst` QoS 0 messages, disconnects cleanly and waits for its socket to close. Prints the errors
 * each socket saw as JSON.
 */
import mqtt from 'mqtt';
import { mqttOptions, type TestDevice } from './fixtures.js';

const chunks: Buffer[] = [];
for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
const { port, burst, devices } = JSON.parse(Buffer.concat(chunks).toString()) as { port: number; burst: number; devices: TestDevice[] };

const errors = await Promise.all(devices.map(async (device, i) => {
  const client = await mqtt.connectAsync(`mqtts://127.0.0.1:${port}`, mqttOptions(device, { protocolVersion: i % 2 ? 4 : 5 }));
  const seen: string[] = [];
  client.stream.on('error', (err: NodeJS.ErrnoException) => seen.push(err.code ?? err.message));
  const socketClosed = new Promise<void>((resolve) => client.stream.once('close', () => resolve()));
  for (let n = 0; n < burst; n++) client.publish(`devices/${device.thingId}/heartbeat`, '', { qos: 0 });
  await client.endAsync();
  await socketClosed;
  return seen;
}));
process.stdout.write(JSON.stringify(errors));
