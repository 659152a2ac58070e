import { scanJsonObject } from '../../src/broker/jsonScan.js';

/** A telemetry message as the broker hands it to the ingest buffer: checked bytes and the signature of their keys. */
export function telemetry(values: Record<string, unknown> | Buffer): [Buffer, number] {
  const bytes = Buffer.isBuffer(values) ? values : Buffer.from(JSON.stringify(values));
  const scanned = scanJsonObject(bytes);
  if (!scanned.ok) throw new Error(`not a telemetry object: ${scanned.problem}`);
  return [bytes, scanned.keys];
}
