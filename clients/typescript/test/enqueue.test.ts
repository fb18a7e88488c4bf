// enqueueParams() and the statements: what reaches PostgreSQL, without PostgreSQL.
import { test } from "node:test";
import assert from "node:assert/strict";
import { closeBatch, enqueue, enqueueParams, openBatch } from "../src/enqueue.js";
import { ConfigError } from "../src/errors.js";
import { quoteIdent, statements } from "../src/sql.js";

test("enqueueParams: defaults are NULL, for the SQL function's own", () => {
  assert.deepEqual(enqueueParams("send_email", { to: "a@b" }),
    ["send_email", '{"to":"a@b"}', null, null, null, null, null, null, null, null]);
});

test("enqueueParams: every option in its place", () => {
  const at = new Date("2030-01-01T00:00:00Z");
  assert.deepEqual(
    enqueueParams("k", undefined, { key: "o-1", uniqueKey: "u", onConflict: "replace", queue: "q", runAt: at,
      priority: -3, maxAttempts: 2 }),
    ["k", "{}", "q", "o-1", at, null, -3, 2, "u", "replace"]);
  assert.equal(enqueueParams("k", {}, { runInMs: 1500.4 })[5], 1500);
});

test("enqueueParams: parents and a batch as bigint text, only when given (older schemas have neither)", () => {
  const dependsOn = [3, 9007199254740993n, "9223372036854775807"];
  assert.deepEqual(enqueueParams("k", {}, { dependsOn, batchId: "5" }).slice(10),
    [["3", "9007199254740993", "9223372036854775807"], "5"]);
  assert.deepEqual(enqueueParams("k", {}, { batchId: 5 }).slice(10), [null, "5"]);
  assert.equal(enqueueParams("k", {}, { dependsOn: [], uniqueKey: "u" }).length, 10);
});

const bad: Array<[string, () => unknown, string]> = [
  ["an empty kind", () => enqueueParams("", {}), "kind"],
  ["runAt and runInMs", () => enqueueParams("k", {}, { runAt: new Date(), runInMs: 1 }), "runAt"],
  ["an invalid Date", () => enqueueParams("k", {}, { runAt: new Date("nope") }), "runAt"],
  ["a priority out of smallint", () => enqueueParams("k", {}, { priority: 40000 }), "priority"],
  ["maxAttempts 0", () => enqueueParams("k", {}, { maxAttempts: 0 }), "maxAttempts"],
  ["an empty key", () => enqueueParams("k", {}, { key: "" }), "key"],
  ["an unknown onConflict", () => enqueueParams("k", {}, { onConflict: "merge" as never }), "onConflict"],
  ["a payload JSON cannot hold", () => enqueueParams("k", () => 1), "payload"],
  ["a parent id 0", () => enqueueParams("k", {}, { dependsOn: [1, 0] }), "dependsOn[1]"],
  ["a parent id beyond bigint", () => enqueueParams("k", {}, { dependsOn: ["9223372036854775808"] }), "dependsOn[0]"],
  ["an unsafe parent number", () => enqueueParams("k", {}, { dependsOn: [2 ** 53 + 2] }), "dependsOn[0]"],
  ["a parent id that is no integer", () => enqueueParams("k", {}, { dependsOn: ["1e3"] }), "dependsOn[0]"],
  ["dependsOn not an array", () => enqueueParams("k", {}, { dependsOn: "12" as never }), "dependsOn"],
  ["10,001 parents", () => enqueueParams("k", {}, { dependsOn: Array.from({ length: 10_001 }, (_, i) => i + 1) }),
    "dependsOn"],
  ["a negative batchId", () => enqueueParams("k", {}, { batchId: -1n }), "batchId"],
  ["a uniqueKey with parents", () => enqueueParams("k", {}, { uniqueKey: "u", dependsOn: [1] }), "uniqueKey"],
  ["a uniqueKey in a batch", () => enqueueParams("k", {}, { uniqueKey: "u", batchId: 1 }), "uniqueKey"],
  ["a traceparent the jobs table would refuse",
    () => enqueueParams("k", {}, { traceparent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01" }), "traceparent"],
];
for (const [name, call, path] of bad) {
  test(`enqueueParams rejects ${name}`, () => {
    assert.throws(call, (e: unknown) => e instanceof ConfigError && e.path === path);
  });
}

test("enqueue: one call of <schema>.enqueue(), the id as a string", async () => {
  const seen: Array<[string, unknown[] | undefined]> = [];
  const client = { query: async (text: string, values?: unknown[]) => (seen.push([text, values]), { rows: [{ id: "9007199254740993" }] }) };
  assert.equal(await enqueue(client, "k", { a: 1 }, { schema: 'my"app' }), "9007199254740993");
  assert.equal(seen.length, 1);
  assert.match(seen[0]![0], /^SELECT "my""app"\.enqueue\(kind => \$1::text/);
});

const pgError = (code: string, message: string, constraint?: string) =>
  Object.assign(new Error(message), { code, constraint });
/** A client whose every query fails with `error`. */
const failing = (error: Error) => ({
  query: async (_text: string, _values?: unknown[]): Promise<{ rows: unknown[] }> => { throw error; },
});

test("enqueue: the version 24 statement only with parents or a batch; its refusals are ConfigErrors", async () => {
  const seen: string[] = [];
  const client = { query: async (text: string) => (seen.push(text), { rows: [{ id: "10" }] }) };
  await enqueue(client, "k", {});
  await enqueue(client, "k", {}, { dependsOn: ["9"] });
  assert.doesNotMatch(seen[0]!, /depends_on/);
  assert.match(seen[1]!, /depends_on => \$11::bigint\[\], batch_id => \$12::bigint\)::text AS id$/);
  const refused: Array<[Error, string]> = [
    [pgError("23503", "job 9 does not exist", "jobs_depends_on_exists"), "dependsOn"],
    [pgError("23503", "batch 4 does not exist", "jobs_batch_exists"), "batchId"],
    [pgError("OC105", "batch 4 is closed: no job may join it any more"), "batchId"],
  ];
  for (const [error, path] of refused) {
    await assert.rejects(enqueue(failing(error), "k", {}, { dependsOn: [9], batchId: 4 }),
      (e: unknown) => e instanceof ConfigError && e.path === path && e.message === `${path}: ${error.message}` &&
        e.cause === error);
  }
  const other = pgError("23503", "a trigger of the application's");
  await assert.rejects(enqueue(failing(other), "k", {}), (e: unknown) => e === other); // not ours to read
});

test("openBatch and closeBatch: one call each, ids as text, refusals as ConfigErrors", async () => {
  const seen: Array<[string, unknown[] | undefined]> = [];
  const client = {
    query: async (text: string, values?: unknown[]) => (seen.push([text, values]), { rows: [{ id: "12" }] }),
  };
  assert.equal(await openBatch(client, { onFinish: { kind: "report", payload: { day: 1 } } }, { schema: "app" }), "12");
  await closeBatch(client, 12n, { schema: "app" });
  assert.deepEqual(seen, [
    ['SELECT "app".open_batch($1::jsonb, $2::jsonb, $3::jsonb)::text AS id',
      [null, null, '{"kind":"report","payload":{"day":1}}']],
    ['SELECT "app".close_batch($1::bigint)', ["12"]],
  ]);
  await assert.rejects(closeBatch(client, 0), (e: unknown) => e instanceof ConfigError && e.path === "batchId");
  await assert.rejects(openBatch(failing(pgError("22023", 'on_finish: "kind" must be a non-empty string')), {}),
    (e: unknown) => e instanceof ConfigError && e.message === 'callbacks: on_finish: "kind" must be a non-empty string',
  );
  await assert.rejects(closeBatch(failing(pgError("P0002", "close_batch: batch 8 does not exist")), 8),
    (e: unknown) => e instanceof ConfigError && e.path === "batchId");
});

test("statements: the schema quoted, the channel as NOTIFY names it", () => {
  assert.equal(quoteIdent('a"b'), '"a""b"');
  const s = statements("oncely");
  assert.equal(s.listen, 'LISTEN "oncely.jobs"');
  assert.equal(s.channel, "oncely.jobs");
  for (const text of [s.leaseJobs, s.completeJob, s.failJob, s.renewLeases, s.releaseJobs]) {
    assert.match(text, /"oncely"\.(lease_jobs|complete_job|fail_job|renew_leases|release_jobs)\(/);
  }
  // ids and tokens come back as text: never a JS number
  assert.match(s.leaseJobs, /id::text AS id/);
  assert.match(s.leaseJobs, /lease_token::text AS lease_token/);
});
