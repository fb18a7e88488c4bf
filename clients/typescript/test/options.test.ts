// validate(): defaults, and the first bad option named.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ConfigError } from "../src/errors.js";
import { connectionsNeeded, line, validate, type Logger, type WorkerOptions } from "../src/options.js";

const quiet: Logger = { debug() {}, info() {}, warn() {}, error() {} };
const defaults = { name: "w", logger: quiet };
const base: WorkerOptions = { connectionString: "postgresql:///app", queues: { emails: {} } };

test("validate: defaults", () => {
  const o = validate(base, defaults);
  assert.equal(o.schema, "oncely");
  assert.equal(o.name, "w");
  assert.deepEqual([...o.queues], [["emails", { concurrency: 1 }]]);
  assert.equal(o.pollIntervalMs, 1000);
  assert.equal(o.renewIntervalMs, 1000);
  assert.equal(o.leaseMs, undefined);
  assert.equal(o.prefetch, undefined); // each queue's concurrency
  assert.equal(validate({ ...base, prefetch: 0 }, defaults).prefetch, 0);
  assert.equal(o.shutdownGraceMs, 10_000);
  assert.equal(o.installSignalHandlers, false);
});

const bad: Array<[string, WorkerOptions, string]> = [
  ["neither a URL nor a pool", { queues: { a: {} } }, "connectionString"],
  ["an empty URL", { connectionString: "", queues: { a: {} } }, "connectionString"],
  ["no queue", { ...base, queues: {} }, "queues"],
  ["concurrency 0", { ...base, queues: { a: { concurrency: 0 } } }, "queues.a.concurrency"],
  ["concurrency 1.5", { ...base, queues: { a: { concurrency: 1.5 } } }, "queues.a.concurrency"],
  ["a queue's unknown key", { ...base, queues: { a: { concurency: 2 } as never } }, "queues.a.concurency"],
  ["an unknown option", { ...base, polInterval: 5 } as never, "polInterval"],
  ["an empty schema", { ...base, schema: "" }, "schema"],
  ["a 64-byte schema", { ...base, schema: "s".repeat(64) }, "schema"],
  ["a lease under 3 s", { ...base, leaseMs: 2000 }, "leaseMs"],
  ["renewal slower than lease/3", { ...base, leaseMs: 3000, renewIntervalMs: 1500 }, "renewIntervalMs"],
  ["a negative prefetch", { ...base, prefetch: -1 }, "prefetch"],
  ["a prefetch over 10000", { ...base, prefetch: 10001 }, "prefetch"],
  ["a poll of 0", { ...base, pollIntervalMs: 0 }, "pollIntervalMs"],
  ["a negative grace", { ...base, shutdownGraceMs: -1 }, "shutdownGraceMs"],
  ["a logger without warn", { ...base, logger: { debug() {}, info() {}, error() {} } as never }, "logger.warn"],
];

for (const [name, options, path] of bad) {
  test(`validate rejects ${name}`, () => {
    assert.throws(() => validate(options, defaults), (e: unknown) => e instanceof ConfigError && e.path === path);
  });
}

test("connectionsNeeded: Σ concurrency + listener + leases + completions + other short statements", () => {
  const o = validate({ ...base, queues: { a: { concurrency: 10 }, b: { concurrency: 5 } } }, defaults);
  assert.equal(connectionsNeeded(o.queues), 19);
});

test("line: key=value, quoted when needed", () => {
  assert.equal(line("job failed", { job_id: "12", error: "Error: no way", n: 3 }),
    'oncely: job failed job_id=12 error="Error: no way" n=3');
});
