#!/usr/bin/env node
// The conformance suite's TypeScript worker (docs/conformance.md): the client in
// clients/typescript, built, with the conformance kinds written as sql_worker.py writes them.
//
//   DATABASE_URL=... ONCELY_SCHEMA=... CONFORMANCE_WORKER=w1 \
//   node ts_worker.mjs CLIENT_DIR --queues default,other [--poll-ms 100] [--concurrency 4]
//
// CLIENT_DIR is the built package (its dist/index.js); ctest passes ONCELY_TS_CLIENT.
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    queues: { type: "string", default: "default" },
    "poll-ms": { type: "string", default: "100" },
    concurrency: { type: "string", default: "4" },
    "grace-ms": { type: "string", default: "2000" },
  },
});
const clientDir = positionals[0] ?? process.env.ONCELY_TS_CLIENT;
if (!clientDir) throw new Error("usage: ts_worker.mjs CLIENT_DIR --queues a,b");
const { Worker } = await import(pathToFileURL(join(clientDir, "dist", "index.js")).href);
const pg = (await import(pathToFileURL(join(clientDir, "node_modules", "pg", "lib", "index.js")).href)).default;

const url = process.env.DATABASE_URL;
const schema = process.env.ONCELY_SCHEMA ?? "oncely";
const name = process.env.CONFORMANCE_WORKER ?? `ts_worker-${process.pid}`;
const table = (t) => `"${schema.replace(/"/g, '""')}".${t}`;
const concurrency = Number(values.concurrency);

const worker = new Worker({
  connectionString: url,
  schema,
  name,
  queues: Object.fromEntries(values.queues.split(",").map((q) => [q, { concurrency }])),
  pollIntervalMs: Number(values["poll-ms"]),
  shutdownGraceMs: Number(values["grace-ms"]),
  installSignalHandlers: true,
});

// credit: one row of conformance_effects, written in the transaction that completes the job.
worker.handle("credit", async (job, client) => {
  const p = job.payload;
  if (p.record) { // its start, on a connection of its own (committed whatever happens next)
    const own = new pg.Client({ connectionString: url });
    await own.connect();
    try {
      await own.query(`INSERT INTO ${table("conformance_starts")} (key, attempt, worker, pid) VALUES ($1, $2, $3, $4)`,
        [job.key, job.attempt, name, process.pid]);
    } finally {
      await own.end();
    }
  }
  if (p.sleep_ms) await sleep(p.sleep_ms, undefined, { signal: job.signal }); // stops early when aborted
  await client.query(
    `INSERT INTO ${table("conformance_effects")} (key, account, cents, worker, attempt) VALUES ($1, $2, $3, $4, $5)`,
    [job.key, p.account, p.cents, name, job.attempt]);
});
worker.handle("fail", () => {
  throw new Error("conformance: this job always fails");
});
worker.handle("poison", () => {
  process.kill(process.pid, "SIGKILL");
});
worker.handle("noop", () => {});

worker.start();
await worker.stopped;
process.exit(0);
