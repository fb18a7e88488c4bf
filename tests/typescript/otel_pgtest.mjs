// The TypeScript client's OpenTelemetry spans against a real PostgreSQL, with the real SDK (an
// in-memory exporter, an AsyncLocalStorage context manager): the traceparent enqueue() stores
// (through its INSERT, which the schema's CHECK on trace_context must accept) is the send
// span's context; each attempt's process span is a child of it, its settle span a child of
// process, the handler's own span nests under process, and a dead letter's spans say so.
//   node --test otel_pgtest.mjs   with ONCELY_TEST_DATABASE_URL, ONCELY_BIN, ONCELY_TS_CLIENT
// Exit 77 (skipped) without a database, unless ONCELY_REQUIRE_PG says it must run.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const url = process.env.ONCELY_TEST_DATABASE_URL;
if (!url) {
  if (process.env.ONCELY_REQUIRE_PG) throw new Error("ONCELY_TEST_DATABASE_URL is not set and ONCELY_REQUIRE_PG is");
  console.error("typescript_otel_pg: skipped (no ONCELY_TEST_DATABASE_URL)");
  process.exit(77);
}
const clientDir = process.env.ONCELY_TS_CLIENT;
// The client's own copies (its devDependencies), so that the SDK registers with the API it loads.
const fromClient = createRequire(join(clientDir, "package.json"));
const { SpanKind, SpanStatusCode, context, trace } = fromClient("@opentelemetry/api");
const { AsyncLocalStorageContextManager } = fromClient("@opentelemetry/context-async-hooks");
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = fromClient("@opentelemetry/sdk-trace-base");
const pg = fromClient("pg");
const { Worker, enqueue, PermanentError } = await import(pathToFileURL(join(clientDir, "dist", "index.js")).href);

const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const tracer = trace.getTracer("otel_pgtest");

const schema = `ts_otel_${process.pid}`;
const s = `"${schema}"`;
const pool = new pg.Pool({ connectionString: url, max: 4 });
const logger = { debug() {}, info() {}, warn() {}, error() {} };
const spans = (name) => exporter.getFinishedSpans().filter((span) => span.name === name);
const byJob = (name) => new Map(spans(name).map((span) => [span.attributes["messaging.message.id"], span]));
const traceparentOf = (span) => `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`;

/** Polls `condition` every 20 ms; fails naming `what` after `ms`. */
async function waitUntil(condition, what, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

before(async () => {
  const env = { ...process.env, DATABASE_URL: url, ONCELY_SCHEMA: schema };
  execFileSync(process.env.ONCELY_BIN, ["migrate"], { env, stdio: "pipe" });
  execFileSync(process.env.ONCELY_BIN, ["queue", "set", "mail", "mode=lease", "lease=3s", "max_attempts=2",
    "backoff.base=100ms", "backoff.cap=200ms"], { env, stdio: "pipe" });
  await pool.query(`CREATE TABLE ${s}.sent (job_id text PRIMARY KEY)`);
});

after(async () => {
  await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
  await pool.end();
});

test("send, process and settle spans from enqueue() to the job's completion or dead letter", async () => {
  const producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const client = await pool.connect();
  let ok, bad, parent;
  try {
    await client.query("BEGIN");
    await tracer.startActiveSpan("request", async (request) => {
      parent = request.spanContext();
      ok = await enqueue(client, "ok", { n: 1 }, { schema, queue: "mail", key: "otel-ok", priority: 2, runInMs: 0 });
      request.end();
    });
    bad = await enqueue(client, "bad", {}, { schema, queue: "mail", traceparent: producer, dependsOn: [] });
    await client.query("COMMIT");
  } finally {
    client.release();
  }
  const sends = byJob("send mail");
  assert.equal(sends.get(ok).kind, SpanKind.PRODUCER);
  assert.equal(sends.get(ok).parentSpanContext?.spanId, parent.spanId);
  assert.equal(sends.get(bad).parentSpanContext?.spanId, "00f067aa0ba902b7");
  const stored = new Map((await pool.query(`SELECT id::text, trace_context, priority FROM ${s}.jobs`)).rows
    .map((r) => [r.id, r]));
  assert.equal(stored.get(ok).trace_context, traceparentOf(sends.get(ok)));
  assert.equal(stored.get(ok).priority, 2);
  assert.equal(stored.get(bad).trace_context, traceparentOf(sends.get(bad)));

  const worker = new Worker({ connectionString: url, schema, queues: { mail: { concurrency: 2 } }, pollIntervalMs: 50,
    logger });
  worker.handle("ok", async (job, tx) => {
    tracer.startSpan("user work").end();
    await tx.query(`INSERT INTO ${s}.sent (job_id) VALUES ($1)`, [job.id]);
  });
  worker.handle("bad", async () => { throw new PermanentError("refused"); });
  worker.start();
  try {
    await waitUntil(() => spans("process mail").length === 2, "two process spans");
  } finally {
    await worker.stop({ graceMs: 1000 });
  }
  const process_ = byJob("process mail");
  const settle = byJob("settle mail");
  for (const [id, outcome] of [[ok, "completed"], [bad, "dead_lettered"]]) {
    const p = process_.get(id);
    assert.equal(p.kind, SpanKind.CONSUMER);
    assert.equal(p.parentSpanContext?.spanId, sends.get(id).spanContext().spanId, "process is a child of the send span");
    assert.equal(p.spanContext().traceId, sends.get(id).spanContext().traceId);
    assert.equal(settle.get(id).parentSpanContext?.spanId, p.spanContext().spanId, "settle is a child of process");
    assert.equal(p.attributes["oncely.job.outcome"], outcome);
    assert.equal(settle.get(id).attributes["oncely.job.outcome"], outcome);
  }
  assert.equal(process_.get(ok).attributes["oncely.job.key"], "otel-ok");
  assert.equal(spans("user work")[0].parentSpanContext?.spanId, process_.get(ok).spanContext().spanId);
  assert.equal(process_.get(bad).attributes["error.type"], "permanent");
  assert.equal(process_.get(bad).status.code, SpanStatusCode.ERROR);
  assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${s}.sent`)).rows[0].n, 1);
  const dead = (await pool.query(`SELECT trace_context FROM ${s}.dead_letters`)).rows;
  assert.deepEqual(dead, [{ trace_context: traceparentOf(sends.get(bad)) }]);
});
