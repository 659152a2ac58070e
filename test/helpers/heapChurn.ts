// A child of test/heapPacing.test.ts: heap pacing as main.ts applies it, then objects that live long enough to be
// promoted and die after (a ring of 200,000 replaced one by one); run with --trace-gc to count the full collections.
import { applyHeapPacing } from '../../src/heapPacing.js';

applyHeapPacing(Number(process.argv[2]));
const ring = new Array<unknown>(200_000);
for (let i = 0; i < 3_000_000; i++) ring[i % ring.length] = { id: `row-${i}`, at: i, values: [i, i + 1, i + 2] };
