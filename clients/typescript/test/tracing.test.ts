// OpenTelemetry spans with the real SDK (an in-memory exporter, the W3C propagator, an
// AsyncLocalStorage context manager): enqueue()'s send span and the traceparent the job
// stores, and a Worker's process and settle spans over a stand-in pool that answers the
// protocol's statements. No database.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan,
} from "@opentelemetry/sdk-trace-base";
import { enqueue } from "../src/enqueue.js";
import { PermanentError } from "../src/errors.js";
import { formatTraceparent, isTraceparent, parseTraceparent } from "../src/tracing.js";
import { Worker } from "../src/worker.js";

const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
const tracer = trace.getTracer("test");

/** The traceparent the W3C propagator writes for `span`. */
function injected(span: ReadableSpan): string | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(trace.setSpanContext(ROOT_CONTEXT, span.spanContext()), carrier);
  return carrier.traceparent;
}
const spansNamed = (name: string) => exporter.getFinishedSpans().filter((s) => s.name === name);
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;
/** Its events' names, each with its attributes when it has some. */
const events = (span: ReadableSpan) => span.events.map((e) =>
  Object.keys(e.attributes ?? {}).length === 0 ? e.name : `${e.name} ${JSON.stringify(e.attributes)}`);
const producerTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

test("traceparents: W3C's format, read and written as the W3C propagator does", () => {
  const sc = parseTraceparent(producerTrace)!;
  const extracted = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, { traceparent: producerTrace }));
  assert.deepEqual(sc, extracted);
  assert.equal(formatTraceparent(sc), producerTrace);
  for (const bad of ["", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", `${producerTrace}-x`]) {
    assert.equal(isTraceparent(bad), false, bad);
    assert.equal(parseTraceparent(bad), undefined);
  }
  assert.equal(isTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"), true);
});

/** A client that records each statement and answers with `id`. */
function recordingClient(id = "9007199254740993") {
  const seen: Array<{ text: string; values: unknown[] }> = [];
  return { seen, query: async (text: string, values: unknown[] = []) => (seen.push({ text, values }), { rows: [{ id }] }) };
}

test("enqueue: a send span, a child of the caller's traceparent, whose context the job stores", async () => {
  exporter.reset();
  const client = recordingClient();
  const id = await enqueue(client, "send_email", { to: "a@b" }, { queue: "mail", key: "order-7", traceparent: producerTrace });
  const [send, ...more] = spansNamed("send mail");
  assert.ok(send !== undefined && more.length === 0);
  assert.equal(send.kind, SpanKind.PRODUCER);
  assert.equal(send.spanContext().traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
  assert.equal(parentOf(send), "00f067aa0ba902b7");
  assert.deepEqual(send.attributes, {
    "messaging.system": "oncely", "messaging.destination.name": "mail", "messaging.operation.name": "send",
    "messaging.operation.type": "send", "oncely.job.kind": "send_email", "oncely.job.key": "order-7",
    "messaging.message.id": id,
  });
  // The job's trace_context is the send span's context, as W3C writes it.
  assert.equal(client.seen.length, 1);
  const { text, values } = client.seen[0]!;
  assert.match(text, /^SELECT "oncely"\.enqueue\(.*, traceparent => \$11::text\)/);
  assert.equal(values[10], injected(send));
  assert.deepEqual(values.slice(0, 8), ["send_email", '{"to":"a@b"}', "mail", "order-7", null, null, null, null]);
});

test("enqueue: without a traceparent, the active span is the send span's parent; a uniqueKey stores none", async () => {
  exporter.reset();
  const client = recordingClient("12");
  await tracer.startActiveSpan("request", async (request) => {
    await enqueue(client, "k", {}, { dependsOn: [3], batchId: 4 });
    await enqueue(client, "k", {}, { uniqueKey: "u" });
    request.end();
  });
  const [request] = spansNamed("request");
  const sends = spansNamed("send default");
  assert.equal(sends.length, 2);
  for (const send of sends) {
    assert.equal(parentOf(send), request!.spanContext().spanId);
    assert.equal(send.attributes["oncely.job.key"], undefined);
    assert.equal(send.attributes["messaging.message.id"], "12");
  }
  assert.match(client.seen[0]!.text,
    /depends_on => \$11::bigint\[\], batch_id => \$12::bigint, traceparent => \$13::text\)/);
  assert.deepEqual(client.seen[0]!.values.slice(10), [["3"], "4", injected(sends[0]!)]);
  // A unique job: enqueue() stores no trace context for it (schema version 26).
  assert.match(client.seen[1]!.text, /^SELECT "oncely"\.enqueue\(/);
});

test("enqueue: a failed insert ends its send span with ERROR and the SQLSTATE as error.type", async () => {
  exporter.reset();
  const denied = Object.assign(new Error("permission denied for table jobs"), { code: "42501" });
  const failing = { query: async () => { throw denied; } };
  await assert.rejects(enqueue(failing, "k", {}), /permission denied/);
  const [send] = spansNamed("send default");
  assert.equal(send!.status.code, SpanStatusCode.ERROR);
  assert.equal(send!.status.message, "Error: permission denied for table jobs");
  assert.equal(send!.attributes["error.type"], "42501");
  assert.equal(send!.attributes["messaging.message.id"], undefined);
});

interface Row {
  id: string; kind: string; payload: unknown; idempotency_key: string | null; attempt: number; lease_token: string;
  lease_expires_ms: number; trace_context: string | null;
}

/**
 * A stand-in for a pg Pool that answers the worker protocol's statements: lease_jobs() hands
 * out `rows` once; complete_job() refuses the lease of `staleCompletion` (OC101) and finds the
 * key of `duplicate` processed (OC102); complete_jobs()
 * skips `staleBatch`; fail_job() says what `failNext` says; renew_leases() reports `lost` lost.
 */
function standInPool(rows: Row[], p: { staleCompletion: string; duplicate: string; staleBatch: string;
  failNext: Record<string, string>; lost: string }) {
  let leased = false;
  const run = async (text: string, values: unknown[] = []): Promise<{ rows: unknown[] }> => {
    if (text.includes(".lease_jobs(")) {
      const out = leased ? [] : rows;
      leased = true;
      return { rows: out };
    }
    if (text.includes(".queue_limits_held(")) return { rows: [{ limited: false }] };
    if (text.includes(".limits_retry_in(")) return { rows: [{ ms: null }] };
    if (text.includes("to_regprocedure")) return { rows: [{ ok: true }] };
    if (text.includes(".complete_job(")) {
      if (values[0] === p.staleCompletion) throw Object.assign(new Error("the lease is not ours"), { code: "OC101" });
      if (values[0] === p.duplicate) throw Object.assign(new Error("already processed"), { code: "OC102" });
      return { rows: [] };
    }
    if (text.includes(".complete_jobs(")) {
      const ids = String(values[0]).slice(1, -1).split(",");
      return { rows: ids.filter((id) => id !== p.staleBatch).map((id) => ({ id })) };
    }
    if (text.includes(".fail_job(")) return { rows: [{ next: p.failNext[String(values[0])] }] };
    if (text.includes(".renew_leases(")) {
      return { rows: (values[0] as string[]).filter((t) => t === p.lost).map((lost) => ({ lost })) };
    }
    if (text.includes(".release_jobs(")) return { rows: [{ released: (values[0] as string[]).length }] };
    return { rows: [] }; // BEGIN, COMMIT, ROLLBACK, LISTEN
  };
  const client = () => ({ query: run, on() {}, off() {}, release() {} });
  return { options: { max: 100 }, connect: async () => client(), query: run, on() {} };
}

const row = (id: string, kind: string, extra: Partial<Row> = {}): Row => ({
  id, kind, payload: {}, idempotency_key: null, attempt: 1, lease_token: `t${id}`, lease_expires_ms: Date.now() + 30_000,
  trace_context: null, ...extra,
});

test("a worker: process and settle spans for every way an attempt ends", async () => {
  exporter.reset();
  const rows = [
    row("1", "tx_ok", { trace_context: producerTrace, idempotency_key: "order-7", attempt: 2 }),
    row("2", "tx_dead"),
    row("3", "jo_retry"),
    row("4", "jo_stale"),
    row("5", "tx_stale"),
    row("6", "lost"),
    row("7", "nobody_handles_it"),
    row("8", "tx_ok", { idempotency_key: "paid-once" }),
  ];
  const pool = standInPool(rows, { staleCompletion: "5", duplicate: "8", staleBatch: "4",
    failNext: { "2": "dead", "3": "retry", "7": "dead" }, lost: "t6" });
  const worker = new Worker({ pool: pool as never, queues: { q: { concurrency: 10 } }, pollIntervalMs: 20,
    renewIntervalMs: 100, logger: { debug() {}, info() {}, warn() {}, error() {} } });
  worker
    .handle("tx_ok", async (_job, _client) => {
      tracer.startSpan("user work").end(); // the process span is active: it nests under it
    })
    .handle("tx_dead", async (_job, _client) => { throw new PermanentError("no such customer"); })
    .handle("jo_retry", async (_job) => { throw new Error("upstream said no"); })
    .handle("jo_stale", async (_job) => {})
    .handle("tx_stale", async (_job, _client) => {})
    .handle("lost", (job) => new Promise<void>((_resolve, reject) => {
      job.signal.addEventListener("abort", () => reject(job.signal.reason));
    }));
  worker.start();
  const deadline = Date.now() + 10_000;
  while (spansNamed("process q").length < rows.length) {
    assert.ok(Date.now() < deadline, `timed out: ${spansNamed("process q").length} process spans`);
    await new Promise((r) => setTimeout(r, 20));
  }
  await worker.stop({ graceMs: 0 });

  const processOf = new Map(spansNamed("process q").map((s) => [s.attributes["messaging.message.id"], s]));
  const settleOf = new Map(spansNamed("settle q").map((s) => [s.attributes["messaging.message.id"], s]));
  const expected: Record<string, [string, string | undefined, boolean]> = { // outcome, error.type, a settle span
    "1": ["completed", undefined, true],
    "2": ["dead_lettered", "permanent", true],
    "3": ["retried", "retryable", true],
    "4": ["lease_stale", undefined, true],
    "5": ["lease_stale", undefined, true],
    "6": ["lease_stale", undefined, false],
    "7": ["dead_lettered", "unknown_kind", true],
    "8": ["deduplicated", undefined, true],
  };
  for (const [id, [outcome, errorType, settles]] of Object.entries(expected)) {
    const p = processOf.get(id);
    assert.ok(p !== undefined, `job ${id} has a process span`);
    assert.equal(p.kind, SpanKind.CONSUMER);
    assert.equal(p.attributes["oncely.job.outcome"], outcome, `job ${id}`);
    assert.equal(p.attributes["error.type"], errorType, `job ${id}`);
    const fine = outcome === "completed" || outcome === "deduplicated";
    assert.equal(p.status.code, fine ? SpanStatusCode.UNSET : SpanStatusCode.ERROR, `job ${id}`);
    assert.equal(p.attributes["messaging.operation.type"], "process");
    const s = settleOf.get(id);
    assert.equal(s !== undefined, settles, `job ${id}: a settle span`);
    if (s === undefined) continue;
    assert.equal(s.kind, SpanKind.CLIENT);
    assert.equal(parentOf(s), p.spanContext().spanId, `job ${id}: settle is a child of process`);
    assert.equal(s.spanContext().traceId, p.spanContext().traceId);
    assert.equal(s.attributes["oncely.job.outcome"], outcome);
    assert.equal(s.attributes["error.type"], errorType);
    assert.equal(s.status.code, SpanStatusCode.UNSET, `job ${id}: the settlement itself did not fail`);
    assert.equal(s.attributes["messaging.operation.name"], "settle");
  }

  // The job's traceparent is the process span's parent; without one, the process span is a root.
  const first = processOf.get("1")!;
  assert.equal(first.spanContext().traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
  assert.equal(parentOf(first), "00f067aa0ba902b7");
  assert.equal(parentOf(processOf.get("2")!), undefined);
  assert.deepEqual(first.attributes, {
    "messaging.system": "oncely", "messaging.destination.name": "q", "messaging.operation.name": "process",
    "messaging.operation.type": "process", "messaging.message.id": "1", "oncely.job.kind": "tx_ok",
    "oncely.job.attempt": 2, "oncely.job.key": "order-7", "oncely.job.outcome": "completed",
  });
  assert.equal(parentOf(spansNamed("user work")[0]!), first.spanContext().spanId);
  assert.equal(processOf.get("2")!.status.message, "PermanentError: no such customer");

  // Lost leases: on the process span, noticed by the renewal or by the completion, which the
  // settle span tells too.
  const noticed = (by: string) => `oncely.lease.lost {"oncely.lease.noticed_by":"${by}"}`;
  assert.deepEqual(events(processOf.get("6")!), [noticed("renewal")]);
  for (const id of ["4", "5"]) {
    assert.deepEqual(events(processOf.get(id)!), [noticed("completion")]);
    assert.deepEqual(events(settleOf.get(id)!), ["oncely.completion.stale"]);
  }
  assert.deepEqual(events(processOf.get("1")!), []);
});

test("without @opentelemetry/api, enqueue() runs the plain statement and stores the caller's traceparent", () => {
  // A child process in which the package cannot be resolved, as in an application without it.
  const hooks = `export async function resolve(specifier, context, next) {
    if (specifier === "@opentelemetry/api") throw Object.assign(new Error("not installed"), { code: "ERR_MODULE_NOT_FOUND" });
    return next(specifier, context);
  }`;
  const enqueueModule = new URL("../src/enqueue.js", import.meta.url).href;
  const tracingModule = new URL("../src/tracing.js", import.meta.url).href;
  const script = `
    import { register } from "node:module";
    register("data:text/javascript,${encodeURIComponent(hooks)}");
    const { enqueue } = await import(${JSON.stringify(enqueueModule)});
    const { loadTracing } = await import(${JSON.stringify(tracingModule)});
    const seen = [];
    const client = { query: async (text, values) => (seen.push({ text, values }), { rows: [{ id: "5" }] }) };
    await enqueue(client, "k", {});
    await enqueue(client, "k", {}, { traceparent: ${JSON.stringify(producerTrace)} });
    console.log(JSON.stringify({ tracing: await loadTracing(), seen }));`;
  const run = spawnSync(process.execPath, ["--input-type=module", "-e", script],
    { cwd: fileURLToPath(new URL(".", import.meta.url)), encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  const { tracing, seen } = JSON.parse(run.stdout) as { tracing: null; seen: Array<{ text: string; values: unknown[] }> };
  assert.equal(tracing, null);
  assert.match(seen[0]!.text, /^SELECT "oncely"\.enqueue\(/);
  assert.match(seen[1]!.text, /^SELECT "oncely"\.enqueue\(.*, traceparent => \$11::text\)/);
  assert.equal(seen[1]!.values[10], producerTrace);
});
