#!/usr/bin/env node
// graphile-worker under oncely's benchmark method (measure.mjs):
//   BENCH_SERVER_URL=postgresql://postgres@127.0.0.1:PORT/postgres \
//     node graphile.mjs burn --config 2p-c24-lq500-cb0 --jobs 20000
import { fileURLToPath } from 'node:url';
import { Logger, makeWorkerUtils, run, runMigrations } from 'graphile-worker';
import { installedVersion, main } from './measure.mjs';

// Warnings and errors only: at "info" graphile-worker logs a line per job.
const logger = new Logger(() => (level, message) => {
  if (level === 'warning' || level === 'error') console.error(`[graphile-worker] ${level}: ${message}`);
});

// The tuning graphile-worker's own performance test uses: a local queue of prefetched jobs
// (refetched after 10 ms when it runs dry) and completions written without batching delay.
const tuned = (size) => ({
  worker: { localQueue: { size, refetchDelay: { durationMs: 10 } }, completeJobBatchDelay: 0, failJobBatchDelay: 0 },
});

// Each with a pool of concurrency + 1 connections, as graphile-worker sizes it by default.
const configs = {
  '2p-c24-lq500-cb0': { processes: 2, concurrency: 24, preset: tuned(500) },  // its fastest burn-down
  'c24-lq500-cb0': { processes: 1, concurrency: 24, preset: tuned(500) },
  c24: { processes: 1, concurrency: 24 },                                     // library defaults
};

const peer = {
  name: 'graphile-worker',
  version: installedVersion('graphile-worker'),
  configs,
  awaitsHandler: true,  // a task's promise is awaited: a handler that waits holds its slot
  // A completed job's row is deleted, so every row left is a job still to run.
  pendingSql: 'SELECT count(*) AS n FROM graphile_worker._private_jobs',
  analyzeSql: 'ANALYZE graphile_worker._private_jobs',

  async install(url) {
    await runMigrations({ connectionString: url, logger });
  },

  async producer(url) {
    const utils = await makeWorkerUtils({ connectionString: url, maxPoolSize: 2, logger });
    return {
      enqueue: (payload) => utils.addJob('noop', payload),
      enqueueMany: (payloads) => utils.addJobs(payloads.map((payload) => ({ identifier: 'noop', payload }))),
      close: () => utils.release(),
    };
  },

  async startWorker(url, config, onStart) {
    const runner = await run({
      connectionString: url,
      concurrency: config.concurrency,
      maxPoolSize: config.concurrency + 1,
      noHandleSignals: true,
      crontab: '',
      logger,
      taskList: { noop: async (payload) => onStart(payload) },
      ...(config.preset ? { preset: config.preset } : {}),
    });
    return { stop: () => runner.stop() };
  },
};

await main(peer, fileURLToPath(import.meta.url));
