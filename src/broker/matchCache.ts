/**
 * Remembers which subscriptions match a topic, in front of the Aedes emitter's topic trie
 * (mqemitter + qlobber): a device publishes on the same few topics over and over, and walking
 * the trie for each message cost about 6% of the broker's CPU at QoS 0. Any subscribe or
 * unsubscribe empties the cache, so a match is never stale. Returns whether a topic has a
 * listener (from the same cache), or undefined when the emitter has no matcher to cache.
 */
interface Matcher {
  add(topic: string, value: unknown): unknown;
  remove(topic: string, value?: unknown): unknown;
  match(topic: string): unknown[];
}

const MAX_TOPICS = 50_000;

export function cacheTopicMatches(emitter: unknown): ((topic: string) => boolean) | undefined {
  const mq = emitter as { _matcher?: Matcher };
  const matcher = mq._matcher;
  if (!matcher || typeof matcher.match !== 'function') return undefined;
  let cache = new Map<string, unknown[]>();
  const { add, remove, match } = matcher;
  matcher.add = function (topic, value) {
    cache = new Map();
    return add.call(this, topic, value);
  };
  matcher.remove = function (topic, value) {
    cache = new Map();
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
  return (topic) => matcher.match(topic).length > 0;
}
