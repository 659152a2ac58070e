import cluster, { type Worker } from 'node:cluster';
import crypto from 'node:crypto';
import path from 'node:path';
import { AggregatorRegistry, type Registry } from 'prom-client';
import type { Config } from './config.js';
import type { Logger } from './log.js';
import { ensureDatabase, startEmbeddedPostgres, type EmbeddedDatabase } from './db/embedded.js';
import { relayWorkerEmitters } from './broker/workerEmitter.js';

/**
 * Multi-core node (BROKER_WORKERS > 1, opt-in; docs/decisions.md "Multi-core"). The node:cluster
 * primary starts the embedded PostgreSQL (when there is no DATABASE_URL) and forks the workers;
 * each worker is a whole gateway node of its own (NODE_ID `<id>-w<n>`: HTTP, broker, ingest,
 * jobs, heartbeat, cluster bus), all on the same database, sharing the HTTP and MQTT listeners
 * (the primary accepts and hands each connection to the next worker). Between the workers' Aedes
 * instances messages go over IPC through the primary, only to the workers that subscribed
 * (src/broker/workerEmitter.ts), so the fast lane stays on. The primary runs no gateway code.
 */

/** IPC of start-up and /metrics between the primary and its workers (besides the emitter's `mqx` ones) */
type Control =
  | { workers: 'ready'; mqttPort: number }
  | { workers: 'ticketKeys' }
  | { workers: 'ticketKeysReply'; keys: Uint8Array }
  | { workers: 'metrics'; id: number }
  | { workers: 'metricsText'; id: number; text?: string; error?: string; contentType: string };

const isControl = (m: unknown): m is Control => typeof m === 'object' && m !== null && typeof (m as { workers?: unknown }).workers === 'string';

/** Is this process a worker of a multi-core node? */
export const isNodeWorker = (config: Pick<Config, 'BROKER_WORKERS'>) => config.BROKER_WORKERS > 1 && cluster.isWorker;

/** A worker tells the primary it is serving (the primary forks the next ones after the first). */
export function reportWorkerReady(mqttPort: number): void {
  process.send?.({ workers: 'ready', mqttPort } satisfies Control);
}

export interface NodePrimary {
  mqttPort: number;
  /** SIGTERM to every worker, wait for them, then stop the embedded PostgreSQL */
  stop(): Promise<void>;
}

/**
 * Starts the node's workers. The first worker starts alone (it creates the database, applies the
 * migrations and the PKI files on a fresh deployment, which must not race); the others follow it
 * together. A worker that exits while the node runs is replaced (a new node id: its devices
 * reconnect, the stale rows of the old id are released like those of any dead node).
 */
export async function startNodePrimary(config: Config, log: Logger): Promise<NodePrimary> {
  // structured clone keeps the Buffers of forwarded MQTT packets (JSON would turn them into arrays)
  cluster.setupPrimary({ serialization: 'advanced' });
  relayWorkerEmitters();
  serveNodeMetrics();
  // TLS session ticket keys for the node's life, the same in every worker (a device's reconnect
  // lands on any worker); kept in memory and given over IPC only
  const ticketKeys = crypto.randomBytes(48);
  cluster.on('message', (worker: Worker, m: unknown) => {
    if (isControl(m) && m.workers === 'ticketKeys' && worker.isConnected()) worker.send({ workers: 'ticketKeysReply', keys: ticketKeys } satisfies Control);
  });

  let embedded: EmbeddedDatabase | undefined;
  let databaseUrl = config.DATABASE_URL;
  if (!databaseUrl) {
    embedded = await startEmbeddedPostgres(path.join(config.DATA_DIR, 'postgres'), { port: config.EMBEDDED_PG_PORT, log: log.child({ component: 'postgres' }) });
    databaseUrl = await ensureDatabase(embedded.url, 'gateway');
  }

  let stopping = false;
  let mqttPort = 0;
  const fork = (index: number): Promise<Worker> => {
    const worker = cluster.fork({ DATABASE_URL: databaseUrl, NODE_ID: `${config.NODE_ID}-w${index}` });
    // a message to a worker whose channel closes meanwhile (a /metrics answer while it exits) fails
    // with an 'error' event: without a listener it would end the primary (exit 1 at a shutdown)
    worker.on('error', (err) => log.warn({ err, worker: index }, 'message to a gateway worker failed'));
    return new Promise((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`worker ${index} exited during start (code ${code})`));
      worker.once('exit', onExit);
      worker.on('message', (m: unknown) => {
        if (!isControl(m) || m.workers !== 'ready') return;
        mqttPort = m.mqttPort;
        worker.off('exit', onExit);
        worker.once('exit', (code, signal) => {
          if (stopping) return;
          log.error({ worker: index, code, signal }, 'gateway worker exited; starting a new one');
          fork(index).catch((err: unknown) => log.error({ err, worker: index }, 'gateway worker did not restart'));
        });
        resolve(worker);
      });
    });
  };

  const stopWorkers = async () => {
    stopping = true;
    const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => Boolean(w));
    await Promise.all(workers.map((w) => new Promise<void>((resolve) => {
      if (w.isDead()) return resolve();
      w.once('exit', () => resolve());
      w.process.kill('SIGTERM');
    })));
    await embedded?.stop();
  };

  try {
    await fork(1);
    await Promise.all(Array.from({ length: config.BROKER_WORKERS - 1 }, (_, i) => fork(i + 2)));
  } catch (err) {
    await stopWorkers().catch(() => {});
    throw err;
  }
  return { mqttPort, stop: stopWorkers };
}

/** The primary answers a worker's /metrics with the sum over all workers (prom-client's aggregator). */
function serveNodeMetrics(): void {
  const aggregator = new AggregatorRegistry();
  cluster.on('message', (worker: Worker, m: unknown) => {
    if (!isControl(m) || m.workers !== 'metrics') return;
    const reply = (r: { text?: string; error?: string }) => {
      if (worker.isConnected()) worker.send({ workers: 'metricsText', id: m.id, contentType: aggregator.contentType, ...r } satisfies Control);
    };
    aggregator.clusterMetrics().then((text) => reply({ text }), (err: Error) => reply({ error: err.message }));
  });
}

/**
 * In a worker: the node's /metrics (counters and gauges summed over every worker, as one node
 * would report them), or undefined in a single-process node. Registers this worker's registry
 * with prom-client's cluster listener, which answers the primary's collection requests.
 */
export function nodeWideMetrics(config: Pick<Config, 'BROKER_WORKERS'>, registry: Registry): (() => Promise<{ text: string; contentType: string }>) | undefined {
  if (!isNodeWorker(config)) return undefined;
  AggregatorRegistry.setRegistries([registry]);
  new AggregatorRegistry(); // installs the worker's listener for the primary's requests
  let nextId = 1;
  const waiting = new Map<number, (m: Extract<Control, { workers: 'metricsText' }>) => void>();
  process.on('message', (m: unknown) => {
    if (!isControl(m) || m.workers !== 'metricsText') return;
    waiting.get(m.id)?.(m);
    waiting.delete(m.id);
  });
  return () => new Promise((resolve, reject) => {
    const id = nextId++;
    waiting.set(id, (m) => (m.text !== undefined ? resolve({ text: m.text, contentType: m.contentType }) : reject(new Error(m.error ?? 'no metrics'))));
    process.send!({ workers: 'metrics', id } satisfies Control);
  });
}

/** In a worker: the node's TLS session ticket keys, from the primary. */
export function nodeTicketKeys(): Promise<Buffer> {
  return new Promise((resolve) => {
    const onMessage = (m: unknown) => {
      if (!isControl(m) || m.workers !== 'ticketKeysReply') return;
      process.off('message', onMessage);
      // structured clone delivers a Uint8Array
      resolve(Buffer.from(m.keys));
    };
    process.on('message', onMessage);
    process.send!({ workers: 'ticketKeys' } satisfies Control);
  });
}
