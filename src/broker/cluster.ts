import { createRequire } from 'node:module';
import { Redis } from 'ioredis';
import MQEmitterRedis from 'mqemitter-redis';
import type { AedesOptions } from 'aedes';

const require = createRequire(import.meta.url);
// aedes-persistence-redis ships no type declarations
const aedesPersistenceRedis = require('aedes-persistence-redis') as (opts: { conn: Redis }) => unknown;

/**
 * Cluster mode: Aedes routes messages between nodes through Redis pub/sub (mqemitter-redis) and
 * keeps sessions, retained messages and QoS 1/2 in flight in Redis (aedes-persistence-redis).
 * The Redis database number of REDIS_URL (`redis://host:6379/3`) isolates one deployment's keys.
 */
export function redisAedesOptions(redisUrl: string): Pick<AedesOptions, 'mq' | 'persistence'> {
  return {
    mq: MQEmitterRedis({ connectionString: redisUrl }),
    persistence: aedesPersistenceRedis({ conn: new Redis(redisUrl, { maxRetriesPerRequest: 3 }) }),
  };
}
