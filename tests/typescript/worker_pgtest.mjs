// The TypeScript client against a real PostgreSQL: what the conformance suite's kinds don't
// reach. enqueue() in a transaction that rolls back or commits, a handler's writes with its
// completion (and without, when it throws), dead letters for an unknown kind, a payload
// parse() rejects and a PermanentError, ids and tokens beyond 2^53 kept exact, stop(), a
// queue held back by its rate leased again when limits_retry_in() says, no jobs leased ahead
// on a queue with limits across workers, a child run after its parent, a batch's callback.
//   node --test worker_pgtest.mjs   with ONCELY_TEST_DATABASE_URL, ONCELY_BIN, ONCELY_TS_CLIENT
// Exit 77 (skipped) without a database, unless ONCELY_REQUIRE_PG says it must run.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const url = process.env.ONCELY_TEST_DATABASE_URL;
if (!url) {
  if (process.env.ONCELY_REQUIRE_PG) throw new Error("ONCELY_TEST_DATABASE_URL is not set and ONCELY_REQUIRE_PG is");
  console.error("typescript_pg: skipped (no ONCELY_TEST_DATABASE_URL)");
  process.exit(77);
}
const clientDir = process.env.ONCELY_TS_CLIENT;
const oncely = await import(pathToFileURL(join(clientDir, "dist", "index.js")).href);
const pg = (await import(pathToFileURL(join(clientDir, "node_modules", "pg", "lib", "index.js")).href)).default;
const { Worker, enqueue, openBatch, closeBatch, ConfigError, PermanentError } = oncely;

const schema = `ts_${process.pid}`;
const s = `"${schema}"`;
const pool = new pg.Pool({ connectionString: url, max: 4 });
const logged = [];
const logger = Object.fromEntries(["debug", "info", "warn", "error"].map((level) =>
  [level, (message, fields) => logged.push({ level, message, ...fields })]));

/** Polls `condition` every 20 ms; fails naming `what` after `ms`. */
async function waitUntil(condition, what, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
const scalar = async (sql, params = []) => (await pool.query(sql, params)).rows[0]?.v;

before(async () => {
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: schema };
  execFileSync(process.env.ONCELY_BIN, ["migrate"], { env, stdio: "pipe" });
  execFileSync(process.env.ONCELY_BIN, ["queue", "set", "mail", "mode=lease", "lease=3s", "max_attempts=2",
    "backoff.base=100ms", "backoff.cap=200ms"], { env, stdio: "pipe" });
  await pool.query(`CREATE TABLE ${s}.sent (key text PRIMARY KEY, job_id text NOT NULL)`);
  // Ids and lease tokens past 2^53: a JS number would round them.
  await pool.query(`ALTER TABLE ${s}.jobs ALTER COLUMN id RESTART WITH 9007199254740993`);
  await pool.query(`ALTER SEQUENCE ${s}.lease_tokens RESTART WITH 9007199254740995`);
});

after(async () => {
  await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await pool.end();
});

test("enqueue commits with the caller's transaction, or not at all", async () => {
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await enqueue(client, "send", { to: "nobody" }, { schema, queue: "mail", key: "rolled-back" });
    await client.query("ROLLBACK");
    assert.equal(await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs`), 0);
    await client.query("BEGIN");
    const id = await enqueue(client, "send", { to: "a@b" }, { schema, queue: "mail", key: "k1", priority: -1 });
    await client.query("COMMIT");
    assert.equal(id, "9007199254740994"); // the rolled-back insert took ...993: sequences don't roll back
    assert.equal(await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs WHERE idempotency_key = 'k1'`), 1);
  } finally {
    client.release();
  }
});

test("a worker: effects with completion, rollback on failure, dead letters, exact ids, stop", async () => {
  const seen = [];
  let failedOnce = false;
  const worker = new Worker({ connectionString: url, schema, queues: { mail: { concurrency: 2 } },
    name: "pgtest", pollIntervalMs: 50, logger });
  worker.handle("send", async (job, client) => {
    seen.push({ id: job.id, token: job.leaseToken, attempt: job.attempt, key: job.key });
    await client.query(`INSERT INTO ${s}.sent (key, job_id) VALUES ($1, $2)`, [job.key, job.id]);
    if (job.payload.flaky && !failedOnce) {
      failedOnce = true;
      throw new Error("flaky: after the write"); // the write must roll back
    }
  });
  worker.handle("strict", async () => {}, {
    parse: (p) => { if (typeof p.n !== "number") throw new TypeError("n must be a number"); return p; },
  });
  worker.handle("refuse", async () => { throw new PermanentError("never", { detail: { why: "test" } }); });
  worker.start();
  for (const [kind, payload, key] of [["send", { flaky: true }, "k2"], ["no_such_kind", {}, "k3"],
    ["strict", { n: "x" }, "k4"], ["refuse", {}, "k5"]]) {
    await enqueue(pool, kind, payload, { schema, queue: "mail", key });
  }
  await waitUntil(async () => (await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs`)) === 0, "every job settled");
  await worker.stop({ graceMs: 1000 });

  assert.deepEqual((await pool.query(`SELECT key, job_id FROM ${s}.sent ORDER BY key`)).rows,
    [{ key: "k1", job_id: "9007199254740994" }, { key: "k2", job_id: "9007199254740995" }]);
  assert.deepEqual((await pool.query(`SELECT idempotency_key AS key FROM ${s}.processed_jobs ORDER BY 1`)).rows,
    [{ key: "k1" }, { key: "k2" }]);
  const first = seen.find((j) => j.key === "k1");
  assert.equal(first.id, "9007199254740994");
  assert.ok(BigInt(first.token) >= 9007199254740995n, `token ${first.token}`);
  assert.deepEqual(seen.filter((j) => j.key === "k2").map((j) => j.attempt), [1, 2]);

  const dead = (await pool.query(`SELECT idempotency_key AS key, error_class, last_error, error_detail
                                    FROM ${s}.dead_letters ORDER BY idempotency_key`)).rows;
  assert.deepEqual(dead.map((d) => [d.key, d.error_class]), [["k3", "permanent"], ["k4", "permanent"], ["k5", "permanent"]]);
  assert.match(dead[0].last_error, /no handler for kind "no_such_kind"/);
  assert.match(dead[1].last_error, /bad payload: TypeError: n must be a number/);
  assert.deepEqual(dead[2].error_detail, { why: "test" });
  assert.ok(logged.some((l) => l.message === "worker stopped"));
  assert.ok(!JSON.stringify(logged).includes(url), "the connection string is never logged");
});

test("a lease queue that is not one is logged once, and the worker stops cleanly", async () => {
  const worker = new Worker({ connectionString: url, schema, queues: { transactional: {} }, pollIntervalMs: 20, logger });
  logged.length = 0;
  worker.start();
  await waitUntil(() => logged.some((l) => l.message.startsWith("lease_jobs failed")), "the lease error");
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(logged.filter((l) => l.message.startsWith("lease_jobs failed")).length, 1);
  assert.equal(logged.find((l) => l.message.startsWith("lease_jobs failed")).hint, "oncely queue set transactional mode=lease");
  await worker.stop();
});

test("job-only handlers: no connection while they run, completions in batches, each job once", async () => {
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: schema };
  execFileSync(process.env.ONCELY_BIN, ["queue", "set", "fast", "mode=lease", "lease=30s"], { env, stdio: "pipe" });
  await pool.query(`INSERT INTO ${s}.jobs (queue, kind, payload, idempotency_key)
                    SELECT 'fast', 'ping', '{}', 'ping-' || i FROM generate_series(1, 300) AS i`);
  const workerPool = new pg.Pool({ connectionString: url, max: 22, application_name: "oncely ts-batch" });
  let completeCalls = 0;
  const query = workerPool.query.bind(workerPool);
  workerPool.query = (...args) => {
    if (String(args[0]).includes("complete_jobs(")) completeCalls += 1;
    return query(...args);
  };
  const ran = new Map();
  const expiryAhead = []; // ms from the handler's start to job.leaseExpiresAt (the lease is 30s)
  const worker = new Worker({ pool: workerPool, schema, queues: { fast: { concurrency: 20 } }, pollIntervalMs: 50, logger });
  worker.handle("ping", async (job) => {
    expiryAhead.push(job.leaseExpiresAt.getTime() - Date.now());
    ran.set(job.key, (ran.get(job.key) ?? 0) + 1);
    await new Promise((r) => setTimeout(r, 5));
  });
  let mostConnections = 0;
  worker.start();
  await waitUntil(async () => {
    const seen = await scalar(`SELECT count(*)::int AS v FROM pg_stat_activity WHERE application_name = 'oncely ts-batch'`);
    mostConnections = Math.max(mostConnections, seen);
    return (await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs WHERE queue = 'fast'`)) === 0;
  }, "the fast queue drained");
  await worker.stop({ graceMs: 1000 });
  await workerPool.end();
  assert.equal(ran.size, 300);
  assert.ok([...ran.values()].every((n) => n === 1), "each job ran once");
  assert.equal(await scalar(`SELECT count(*)::int AS v FROM ${s}.processed_jobs WHERE idempotency_key LIKE 'ping-%'`), 300);
  // 20 handlers at a time, each holding nothing: the LISTEN client and the short statements.
  assert.ok(mostConnections <= 4, `connections: ${mostConnections}`);
  assert.ok(completeCalls < 100, `complete_jobs calls: ${completeCalls} for 300 jobs`);
  assert.ok(expiryAhead.every((ms) => ms > 20_000 && ms <= 31_000), `leaseExpiresAt ahead: ${expiryAhead.slice(0, 5)}`);
});

test("a job-only handler whose lease was taken: its completion is refused, the job runs once", async () => {
  let release;
  const started = new Promise((resolve) => (release = resolve));
  let proceed;
  const gate = new Promise((resolve) => (proceed = resolve));
  const worker = new Worker({ connectionString: url, schema, queues: { fast: { concurrency: 1 } }, pollIntervalMs: 50,
    renewIntervalMs: 100, logger });
  worker.handle("slow", async (job) => { release(job); await gate; });
  logged.length = 0;
  worker.start();
  const id = await enqueue(pool, "slow", {}, { schema, queue: "fast", key: "stolen" });
  const job = await started;
  // Another worker takes the job over (as after an expired lease), and completes it.
  const stolen = await scalar(`UPDATE ${s}.jobs SET lease_token = nextval('${s}.lease_tokens')
                               WHERE id = $1 RETURNING lease_token::text AS v`, [id]);
  assert.notEqual(stolen, job.leaseToken);
  await waitUntil(() => job.signal.aborted, "the handler's signal to abort");
  proceed(); // it finishes anyway
  await waitUntil(() => logged.some((l) => l.message.startsWith("lease lost before the job's completion")),
    "the refused completion");
  assert.equal(await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs WHERE id = $1`, [id]), 1);
  await pool.query(`SELECT ${s}.complete_job($1::bigint, $2::bigint)`, [id, stolen]);
  await worker.stop({ graceMs: 1000 });
  assert.equal(await scalar(`SELECT count(*)::int AS v FROM ${s}.processed_jobs WHERE idempotency_key = 'stolen'`), 1);
});

test("a queue held back by its rate is leased again when the window moves on, not at the poll", async () => {
  // No commit announces a rate window moving on: after a lease that the rate cut short, the
  // worker leases again when limits_retry_in() says (with the 5 s poll, 6 jobs took about 10 s).
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: schema };
  execFileSync(process.env.ONCELY_BIN, ["queue", "set", "rated", "mode=lease"], { env, stdio: "pipe" });
  await pool.query(`SELECT ${s}.set_queue_limits('rated', NULL, NULL, NULL, 2, interval '1 second')`);
  await pool.query(`INSERT INTO ${s}.jobs (queue, kind) SELECT 'rated', 'tick' FROM generate_series(1, 6)`);
  const worker = new Worker({ connectionString: url, schema, queues: { rated: { concurrency: 2 } }, pollIntervalMs: 5000,
    logger });
  worker.handle("tick", async (_job) => {});
  const started = Date.now();
  worker.start();
  try {
    await waitUntil(async () => (await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs WHERE queue = 'rated'`)) === 0,
      "six jobs done", 15_000);
  } finally {
    await worker.stop({ graceMs: 1000 });
  }
  const took = Date.now() - started;
  assert.ok(took > 1900 && took < 3500, `6 jobs at 2 a second took ${took} ms`); // the third pair starts 2 s after the first
});

/** Runs a worker of concurrency 1 on the queue, with 5 jobs whose handler blocks; returns the
 *  most jobs of the queue that were leased at once while the first one ran. */
async function mostLeasedWhileOneRuns(queue, options = {}) {
  await pool.query(`INSERT INTO ${s}.jobs (queue, kind) SELECT $1, 'block' FROM generate_series(1, 5)`, [queue]);
  let running = false;
  let proceed;
  const gate = new Promise((resolve) => (proceed = resolve));
  const worker = new Worker({ connectionString: url, schema, queues: { [queue]: { concurrency: 1 } }, pollIntervalMs: 50,
    logger, ...options });
  worker.handle("block", async (_job) => { running = true; await gate; });
  worker.start();
  let most = 0;
  try {
    await waitUntil(() => running, "the first job running");
    for (const deadline = Date.now() + 500; Date.now() < deadline;) { // 10 polls: time enough to lease ahead
      most = Math.max(most, await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs
                                           WHERE queue = $1 AND lease_token IS NOT NULL`, [queue]));
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally {
    proceed();
    await worker.stop({ graceMs: 1000 });
    await pool.query(`DELETE FROM ${s}.jobs WHERE queue = $1`, [queue]);
  }
  return most;
}

test("a queue with limits across workers leases nothing ahead; one without does", async () => {
  // A job leased ahead holds one of the queue's slots (its live lease counts as running) and
  // its start in the rate window while it waits in the worker without running.
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: schema };
  for (const queue of ["limited", "unlimited"]) {
    execFileSync(process.env.ONCELY_BIN, ["queue", "set", queue, "mode=lease"], { env, stdio: "pipe" });
  }
  await pool.query(`SELECT ${s}.set_queue_limits('limited', 2, NULL, NULL)`);
  assert.equal(await mostLeasedWhileOneRuns("limited"), 1);
  logged.length = 0;
  assert.equal(await mostLeasedWhileOneRuns("limited", { prefetch: 3 }), 1); // an explicit prefetch too, with a warning
  assert.deepEqual(logged.filter((l) => l.level === "warn").map((l) => l.message),
    ["queue 'limited' has limits across workers: jobs are not leased ahead (prefetch ignored for it)"]);
  assert.equal(await mostLeasedWhileOneRuns("unlimited"), 2); // its concurrency, 1, leased ahead
});

test("limits set while a worker runs stop its leases ahead once they hold one back", async () => {
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: schema };
  execFileSync(process.env.ONCELY_BIN, ["queue", "set", "later", "mode=lease"], { env, stdio: "pipe" });
  let running = 0;
  let proceed;
  const gate = new Promise((resolve) => (proceed = resolve));
  const worker = new Worker({ connectionString: url, schema, queues: { later: { concurrency: 2 } }, pollIntervalMs: 50,
    logger }); // room for 4: 2 running, 2 ahead
  worker.handle("block", async (_job) => { running += 1; await gate; });
  worker.start();
  let most = 0;
  try {
    await new Promise((r) => setTimeout(r, 200)); // started: it saw no limits
    await pool.query(`SELECT ${s}.set_queue_limits('later', 1, NULL, NULL)`);
    await pool.query(`INSERT INTO ${s}.jobs (queue, kind) SELECT 'later', 'block' FROM generate_series(1, 6)`);
    await waitUntil(() => running > 0, "a job running"); // a lease of 4 came back with 1: limits_retry_in() is not null
    await new Promise((r) => setTimeout(r, 200));
    await pool.query(`SELECT ${s}.set_queue_limits('later', 10, NULL, NULL)`);
    for (const deadline = Date.now() + 500; Date.now() < deadline;) {
      most = Math.max(most, await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs
                                           WHERE queue = 'later' AND lease_token IS NOT NULL`));
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally {
    proceed();
    await worker.stop({ graceMs: 1000 });
    await pool.query(`DELETE FROM ${s}.jobs WHERE queue = 'later'`);
  }
  assert.equal(most, 2); // its free slots, not 2 more ahead
});

test("a schema without limits_retry_in(): short leases go on, nothing logged", async () => {
  const old = `${schema}_v22`;
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: old };
  execFileSync(process.env.ONCELY_BIN, ["migrate"], { env, stdio: "pipe" });
  execFileSync(process.env.ONCELY_BIN, ["queue", "set", "fast", "mode=lease"], { env, stdio: "pipe" });
  try {
    await pool.query(`DROP FUNCTION "${old}".limits_retry_in(text), "${old}".queue_limits_held(text)`); // as before version 23
    logged.length = 0;
    const worker = new Worker({ connectionString: url, schema: old, queues: { fast: {} }, pollIntervalMs: 20, logger });
    worker.handle("ping", async (_job) => {});
    worker.start();
    try {
      for (const key of ["a", "b", "c"]) { // each lease comes back short
        await enqueue(pool, "ping", {}, { schema: old, queue: "fast", key });
        await waitUntil(async () => (await scalar(`SELECT count(*)::int AS v FROM "${old}".jobs`)) === 0, `job ${key}`);
      }
    } finally {
      await worker.stop({ graceMs: 1000 });
    }
    assert.equal(await scalar(`SELECT count(*)::int AS v FROM "${old}".processed_jobs`), 3);
    assert.deepEqual(logged.filter((l) => l.level === "warn" || l.level === "error"), []);
  } finally {
    await pool.query(`DROP SCHEMA "${old}" CASCADE`);
  }
});

test("job-only handlers on a schema without complete_jobs(): the worker says so and stops, leasing nothing", async () => {
  const old = `${schema}_v19`;
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: old };
  execFileSync(process.env.ONCELY_BIN, ["migrate"], { env, stdio: "pipe" });
  execFileSync(process.env.ONCELY_BIN, ["queue", "set", "fast", "mode=lease"], { env, stdio: "pipe" });
  try {
    await pool.query(`DROP FUNCTION "${old}".complete_jobs(bigint[], bigint[])`); // as before version 20
    await enqueue(pool, "ping", {}, { schema: old, queue: "fast", key: "early" });
    logged.length = 0;
    const worker = new Worker({ connectionString: url, schema: old, queues: { fast: {} }, pollIntervalMs: 20, logger });
    worker.handle("ping", async (_job) => {});
    worker.start();
    await worker.stopped;
    const error = logged.find((l) => l.level === "error");
    assert.match(error?.message ?? "", /need complete_jobs\(\), schema version 20/);
    assert.equal(error.hint, `ONCELY_SCHEMA=${old} oncely migrate`);
    assert.equal(await scalar(`SELECT attempts AS v FROM "${old}".jobs`), 0, "nothing leased");
  } finally {
    await pool.query(`DROP SCHEMA "${old}" CASCADE`);
  }
});

test("a child runs after its parent; a closed batch enqueues its callback once", async () => {
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: schema };
  execFileSync(process.env.ONCELY_BIN, ["queue", "set", "deps", "mode=lease"], { env, stdio: "pipe" });
  const order = [];
  const callbacks = [];
  const worker = new Worker({ connectionString: url, schema, queues: { deps: { concurrency: 2 } }, pollIntervalMs: 50,
    logger }); // two slots: the child would run beside its parent if it did not wait
  worker.handle("step", async (job) => {
    order.push(`${job.payload.name} started`);
    if (job.payload.name === "parent") await new Promise((r) => setTimeout(r, 300));
    order.push(`${job.payload.name} done`);
  });
  worker.handle("member", async (_job) => {});
  worker.handle("report", async (job) => { callbacks.push(job.payload); });

  const parent = await enqueue(pool, "step", { name: "parent" }, { schema, queue: "deps" });
  const child = await enqueue(pool, "step", { name: "child" }, { schema, queue: "deps", dependsOn: [parent] });
  assert.deepEqual((await pool.query(`SELECT depends_on::text[] AS d, parents_left FROM ${s}.jobs WHERE id = $1`,
    [child])).rows, [{ d: [parent], parents_left: 1 }]); // ids past 2^53, exact
  const batch = await openBatch(pool, { onFinish: { kind: "report", queue: "deps", payload: { day: 1 } } }, { schema });
  for (const n of [1, 2, 3]) await enqueue(pool, "member", { n }, { schema, queue: "deps", batchId: batch });
  await closeBatch(pool, batch, { schema });
  worker.start();
  try {
    await waitUntil(async () => callbacks.length === 1 &&
      (await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs WHERE queue = 'deps'`)) === 0, "every deps job done");
  } finally {
    await worker.stop({ graceMs: 1000 });
  }
  assert.deepEqual(order, ["parent started", "parent done", "child started", "child done"]);
  assert.deepEqual(callbacks, [{ day: 1, batch_id: Number(batch), completed: 3, dead: 0 }]);
  assert.equal(await scalar(`SELECT count(*)::int AS v FROM ${s}.processed_jobs WHERE kind = 'report'`), 1);

  const refused = async (promise, path, message) =>
    assert.rejects(promise, (e) => e instanceof ConfigError && e.path === path && message.test(e.message));
  await refused(enqueue(pool, "member", {}, { schema, queue: "deps", batchId: batch }), "batchId", /is closed/);
  await refused(enqueue(pool, "step", {}, { schema, queue: "deps", dependsOn: [parent, "9223372036854775807"] }),
    "dependsOn", /job 9223372036854775807 does not exist/);
  await refused(closeBatch(pool, "999999", { schema }), "batchId", /batch 999999 does not exist/);
  await refused(openBatch(pool, { onFailure: { kind: "" } }, { schema }), "callbacks", /on_failure: "kind"/);
});

test("a handler's result is its job's output, in its completed record; more than 64 KiB fails it permanently", async () => {
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: schema };
  execFileSync(process.env.ONCELY_BIN, ["queue", "set", "outputs", "mode=lease"], { env, stdio: "pipe" });
  const worker = new Worker({ connectionString: url, schema, queues: { outputs: { concurrency: 2 } },
    name: "ts-output-test", pollIntervalMs: 50, logger });
  worker.handle("charge", async (job, client) => {
    await client.query("SELECT 1");
    return { charge: `ch_${job.key}`, cents: 1250 };
  });
  worker.handle("ping", async (_job) => [1, 2, 3]); // job-only: completed in a batch, with its output
  worker.handle("quiet", async (_job) => {});
  worker.handle("huge", async (_job, _client) => "x".repeat(70000));
  worker.handle("opaque", async (_job) => 10n);
  worker.start();
  const ids = {};
  for (const kind of ["charge", "ping", "quiet", "huge", "opaque"]) {
    ids[kind] = await enqueue(pool, kind, {}, { schema, queue: "outputs", key: `out-${kind}` });
  }
  await waitUntil(async () => (await scalar(`SELECT count(*)::int AS v FROM ${s}.jobs WHERE queue = 'outputs'`)) === 0,
    "every job settled");
  await worker.stop({ graceMs: 1000 });
  const records = Object.fromEntries((await pool.query(
    `SELECT job_id::text AS id, output::text AS output, attempt, worker FROM ${s}.processed_jobs WHERE queue = 'outputs'`,
  )).rows.map((r) => [r.id, r]));
  assert.deepEqual(records[ids.charge], { id: ids.charge, output: '{"cents": 1250, "charge": "ch_out-charge"}',
    attempt: 1, worker: "ts-output-test" });
  assert.equal(records[ids.ping].output, "[1, 2, 3]");
  assert.equal(records[ids.quiet].output, null);
  const dead = Object.fromEntries((await pool.query(
    `SELECT job_id::text AS id, error_class, last_error FROM ${s}.dead_letters WHERE queue = 'outputs'`,
  )).rows.map((r) => [r.id, r]));
  assert.equal(dead[ids.huge].error_class, "permanent");
  assert.equal(dead[ids.huge].last_error, "PermanentError: output is 70002 bytes of JSON, over the limit of 65536 (64 KiB)");
  assert.match(dead[ids.opaque].last_error, /the handler's result is not JSON/);
});
