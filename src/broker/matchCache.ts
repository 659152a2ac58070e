import { emitterMatcher } from './aedesInternals.js';

const MAX_TOPICS = 50_000;

export interface TopicListeners {
  (topic: string): boolean;
  generation(): number;
}

/**
 * Remembers which subscriptions match a topic, in front of the Aedes emitter's topic trie
 * (mqemitter + qlobber): a device publishes on the same few topics over and over, and walking
 * the trie for each message cost about 6% of the broker's CPU at QoS 0. Any subscribe or
 * unsubscribe empties the cache, so a match is never stale. Returns whether a topic has a
 * listener (from the same cache), or undefined when the emitter has no matcher to cache; its
 * `generation()` changes with every subscribe and unsubscribe (an answer remembered with the
 * generation it was given in holds while the generation is the same).
 */
export function cacheTopicMatches(emitter: unknown): TopicListeners | undefined {
  // mqemitter's trie (aedesInternals.ts); its methods are wrapped on the instance, which the emitter calls
  const matcher = emitterMatcher(emitter);
  if (!matcher || typeof matcher.match !== 'function') return undefined;
  let cache = new Map<string, unknown[]>();
  let generation = 0;
  const { add, remove, match } = matcher;
  matcher.add = function (topic, value) {
    cache = new Map();
    generation += 1;
    return add.call(this, topic, value);
  };
  matcher.remove = function (topic, value) {
    cache = new Map();
    generation += 1;
    return remove.call(this, topic, value);
  };
  matcher.match = function (topic) {
    let found = cache.get(topic);
    if (found === undefined) {
      found = match.call(this, topic);
      if (cache.size >= MAX_TOPICS) cache = new Map();
      cache.set(topic, found);
    }
    return found;
  };
  return Object.assign((topic: string) => matcher.match(topic).length > 0, { generation: () => generation });
}
