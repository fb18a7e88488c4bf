// decide(): every way an attempt can end, as a table (docs/typescript.md has the same one).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ConfigError, LeaseLostError, PermanentError, RetryAfterError, ShutdownError, decide, describe, sqlStateOf,
} from "../src/errors.js";

const pgError = (code: string, message = "from the server") => Object.assign(new Error(message), { code });

const cases: Array<[string, unknown, unknown, ReturnType<typeof decide>]> = [
  ["OC101 from complete_job", pgError("OC101"), undefined, { type: "leaseLost" }],
  ["OC101 wins over a shutdown abort", pgError("OC101"), new ShutdownError("stop"), { type: "leaseLost" }],
  ["OC102: another copy completed", pgError("OC102"), undefined, { type: "release", why: "duplicate" }],
  ["54000: complete_job refused the output", pgError("54000", "output is 70000 bytes"), undefined,
    { type: "fail", retryable: false, message: "Error: output is 70000 bytes" }],
  ["aborted: lease lost", new Error("AbortError"), new LeaseLostError("lost"), { type: "leaseLost" }],
  ["aborted: shutdown", new Error("AbortError"), new ShutdownError("stop"), { type: "release", why: "shutdown" }],
  ["PermanentError", new PermanentError("bad input"), undefined,
    { type: "fail", retryable: false, message: "PermanentError: bad input" }],
  ["PermanentError with detail", new PermanentError("bad", { detail: { field: "to" } }), undefined,
    { type: "fail", retryable: false, message: "PermanentError: bad", detail: { field: "to" } }],
  ["RetryAfterError", new RetryAfterError(5000, "rate limited"), undefined,
    { type: "fail", retryable: true, message: "RetryAfterError: rate limited", retryInMs: 5000 }],
  ["any Error", new TypeError("x is undefined"), undefined,
    { type: "fail", retryable: true, message: "TypeError: x is undefined" }],
  ["a handler's SQL error", pgError("23505", "duplicate key"), undefined,
    { type: "fail", retryable: true, message: "Error: duplicate key" }],
  ["a thrown string", "boom", undefined, { type: "fail", retryable: true, message: "boom" }],
  ["a thrown object", { why: 1 }, undefined, { type: "fail", retryable: true, message: 'non-Error thrown: {"why":1}' }],
];

for (const [name, error, reason, expected] of cases) {
  test(`decide: ${name}`, () => assert.deepEqual(decide(error, reason), expected));
}

test("describe: long messages are cut to 2,000 characters", () => {
  const text = describe(new Error("x".repeat(5000)));
  assert.equal(text.length, 2000);
  assert.ok(text.endsWith("…"));
});

test("sqlStateOf: only five-character codes count", () => {
  assert.equal(sqlStateOf(pgError("OC101")), "OC101");
  assert.equal(sqlStateOf(Object.assign(new Error(), { code: "ECONNREFUSED" })), undefined);
  assert.equal(sqlStateOf(null), undefined);
});

test("RetryAfterError: 0..30 days", () => {
  assert.throws(() => new RetryAfterError(-1, "x"), RangeError);
  assert.throws(() => new RetryAfterError(31 * 24 * 3600 * 1000, "x"), RangeError);
});

test("ConfigError names its option", () => {
  assert.equal(new ConfigError("queues.a.concurrency", "bad").message, "queues.a.concurrency: bad");
});
