// The delivery thread's entry, plain JavaScript: a worker thread does not inherit the TypeScript
// loader of `tsx src/main.ts` or of the test runner, so it registers tsx itself when the module is
// TypeScript (the compiled build hands it the .js module, which loads as it is).
import { workerData } from 'node:worker_threads';

if (workerData.module.endsWith('.ts')) (await import('tsx/esm/api')).register();
await import(workerData.module);
