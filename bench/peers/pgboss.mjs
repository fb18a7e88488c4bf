#!/usr/bin/env node
// pg-boss under oncely's benchmark method (measure.mjs):
//   BENCH_SERVER_URL=postgresql://postgres@127.0.0.1:PORT/postgres \
//     node pgboss.mjs burn --config b100-c4-burst-tx --jobs 20000
import { fileURLToPath } from 'node:url';
import { PgBoss } from 'pg-boss';
import { installedVersion, main } from './measure.mjs';
const QUEUE = 'bench';

// boss: PgBoss constructor options; work: boss.work() options; queue: createQueue() options.
// Fetches poll every 0.5 s (pg-boss's minimum) unless a full batch asks for the next at once.
const configs = {
  // Handler and completion in one transaction, like oncely's handlers (this one writes nothing).
  'b100-c4-burst-tx': { processes: 1, boss: { max: 10 },
    work: { batchSize: 100, localConcurrency: 4, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true, transactional: true } },
  // Its fastest burn-down without a transaction around the handler.
  'b500-c2-burst': { processes: 1, boss: { max: 10 },
    work: { batchSize: 500, localConcurrency: 2, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true } },
  // Idle latency: LISTEN/NOTIFY on, one job at a time.
  'b1-c1-notify': { processes: 1, boss: { max: 10, useListenNotify: true }, queue: { notify: true },
    work: { batchSize: 1, localConcurrency: 1, pollingIntervalSeconds: 0.5 } },
};

// Instances that only install or enqueue run none of pg-boss's background maintenance.
const passive = { supervise: false, schedule: false };
const report = (e) => console.error(`[pg-boss] ${e?.message ?? e}`);

async function started(options) {
  const boss = new PgBoss(options);
  boss.on('error', report);
  await boss.start();
  return boss;
}

const peer = {
  name: 'pg-boss',
  version: installedVersion('pg-boss'),
  configs,
  // pg-boss keeps completed jobs (until retention removes them): count the unfinished ones.
  pendingSql: `SELECT count(*) AS n FROM pgboss.job WHERE name = '${QUEUE}' AND state IN ('created', 'retry', 'active')`,
  analyzeSql: 'ANALYZE pgboss.job',

  async install(url, config) {
    const boss = await started({ connectionString: url, max: 2, ...passive });
    await boss.createQueue(QUEUE, config?.queue ?? {});
    await boss.stop({ graceful: false, timeout: 1000 });
  },

  async producer(url) {
    const boss = await started({ connectionString: url, max: 2, ...passive });
    return {
      enqueue: (payload) => boss.send(QUEUE, payload),
      enqueueMany: (payloads) => boss.insert(QUEUE, payloads.map((data) => ({ data }))),
      close: () => boss.stop({ graceful: false, timeout: 1000 }),
    };
  },

  async startWorker(url, config, onStart) {
    const boss = await started({ connectionString: url, ...config.boss });
    await boss.work(QUEUE, config.work, async (jobs) => {
      for (const job of jobs) onStart(job.data);
    });
    return { stop: () => boss.stop({ graceful: true, timeout: 5000 }) };
  },
};

await main(peer, fileURLToPath(import.meta.url));
