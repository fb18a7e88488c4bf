#!/usr/bin/env node
// oncely's TypeScript client (clients/typescript) under the peers' benchmark method
// (measure.mjs), so that it is measured exactly as graphile-worker and pg-boss are:
//   ONCELY_TS_CLIENT=build/tests/typescript-client ONCELY_BIN=build/src/oncely \
//   BENCH_SERVER_URL=postgresql://postgres@127.0.0.1:PORT/postgres \
//     node oncely-ts.mjs burn --config c24 --jobs 20000 [--handler-ms 10]
// ONCELY_TS_CLIENT is the built package (ctest's typescript_setup builds it there).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { main } from './measure.mjs';

const clientDir = process.env.ONCELY_TS_CLIENT;
if (!clientDir || !process.env.ONCELY_BIN) throw new Error('set ONCELY_TS_CLIENT (the built client) and ONCELY_BIN');
const { Worker, enqueue } = await import(pathToFileURL(join(clientDir, 'dist', 'index.js')).href);
const pg = (await import(pathToFileURL(join(clientDir, 'node_modules', 'pg', 'lib', 'index.js')).href)).default;
const version = JSON.parse(fs.readFileSync(join(clientDir, 'package.json'), 'utf8')).version;

const quiet = { debug() {}, info() {}, warn: (m) => console.error(`[oncely-ts] ${m}`), error: (m) => console.error(`[oncely-ts] ${m}`) };

// The pool the worker makes itself (concurrency + 2). The no-op handler declares only the job,
// so it is job-only (completed in batches by complete_jobs()); the -tx configurations declare
// the client too, as a handler with writes to commit with its completion does (one commit per
// job). prefetch: jobs leased ahead per process (default its concurrency); 500 matches
// graphile-worker's local queue in its fastest configuration; from 2000 every lease_jobs()
// call carries its maximum, 1000 jobs.
const configs = {
  c24: { processes: 1, concurrency: 24 },
  '2p-c24': { processes: 2, concurrency: 24 },
  'c24-pf500': { processes: 1, concurrency: 24, prefetch: 500 },
  '2p-c24-pf500': { processes: 2, concurrency: 24, prefetch: 500 },
  '2p-c24-pf1000': { processes: 2, concurrency: 24, prefetch: 1000 },
  '2p-c24-pf2000': { processes: 2, concurrency: 24, prefetch: 2000 },
  'c24-pf2000': { processes: 1, concurrency: 24, prefetch: 2000 },
  'c24-tx': { processes: 1, concurrency: 24, transaction: true },
  c50: { processes: 1, concurrency: 50 },
  'c50-tx': { processes: 1, concurrency: 50, transaction: true },
};

const peer = {
  name: 'oncely-ts',
  version,
  configs,
  awaitsHandler: true,  // the handler's promise is awaited in its slot, as graphile-worker's
  // A completed job's row is deleted in its completing transaction: every row left is to run.
  pendingSql: 'SELECT count(*) AS n FROM oncely.jobs',
  analyzeSql: 'ANALYZE oncely.jobs',

  async install(url) {
    const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: 'oncely' };
    execFileSync(process.env.ONCELY_BIN, ['migrate'], { env, stdio: 'pipe' });
    execFileSync(process.env.ONCELY_BIN, ['queue', 'set', 'default', 'mode=lease', 'lease=30s'], { env, stdio: 'pipe' });
  },

  async producer(url) {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    return {
      enqueue: (payload) => enqueue(pool, 'noop', payload),
      // A producer may insert into jobs directly (docs/schema.md): one statement per chunk,
      // as graphile-worker's addJobs is one call.
      enqueueMany: (payloads) => pool.query(
        "INSERT INTO oncely.jobs (kind, payload) SELECT 'noop', p FROM jsonb_array_elements($1::jsonb) AS p",
        [JSON.stringify(payloads)]),
      close: () => pool.end(),
    };
  },

  async startWorker(url, config, onStart) {
    const worker = new Worker({ connectionString: url, queues: { default: { concurrency: config.concurrency } },
      logger: quiet, pollIntervalMs: 1000, prefetch: config.prefetch });
    if (config.transaction) worker.handle('noop', async (job, _client) => onStart(job.payload));
    else worker.handle('noop', async (job) => onStart(job.payload));
    worker.start();
    return { stop: () => worker.stop({ graceMs: 5000 }) };
  },
};

await main(peer, fileURLToPath(import.meta.url));
