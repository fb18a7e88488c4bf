// enqueueParams() and the statements: what reaches PostgreSQL, without PostgreSQL.
import { test } from "node:test";
import assert from "node:assert/strict";
import { enqueue, enqueueParams } from "../src/enqueue.js";
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

const bad: Array<[string, () => unknown, string]> = [
  ["an empty kind", () => enqueueParams("", {}), "kind"],
  ["runAt and runInMs", () => enqueueParams("k", {}, { runAt: new Date(), runInMs: 1 }), "runAt"],
  ["an invalid Date", () => enqueueParams("k", {}, { runAt: new Date("nope") }), "runAt"],
  ["a priority out of smallint", () => enqueueParams("k", {}, { priority: 40000 }), "priority"],
  ["maxAttempts 0", () => enqueueParams("k", {}, { maxAttempts: 0 }), "maxAttempts"],
  ["an empty key", () => enqueueParams("k", {}, { key: "" }), "key"],
  ["an unknown onConflict", () => enqueueParams("k", {}, { onConflict: "merge" as never }), "onConflict"],
  ["a payload JSON cannot hold", () => enqueueParams("k", () => 1), "payload"],
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
