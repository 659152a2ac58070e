import { Redis } from 'ioredis';

/** The run's Redis (cluster-mode tests skip with a printed reason when it is not reachable). */
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

export async function redisReachable(url = REDIS_URL): Promise<boolean> {
  const r = new Redis(url, { lazyConnect: true, connectTimeout: 1000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  try {
    await r.connect();
    return (await r.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    r.disconnect();
  }
}
