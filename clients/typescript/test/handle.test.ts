// handle(): which path a handler takes (its declared parameters, or `transaction`), and the
// registrations it refuses. No database: a Worker's pool connects only once it is used.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Worker } from "../src/worker.js";

const worker = () => new Worker({ connectionString: "postgresql://nobody@127.0.0.1:1/none", queues: { q: {} } });
/** Whether `kind`'s handler runs in a transaction, as handle() recorded it. */
const transactional = (w: Worker, kind: string) =>
  (w as unknown as { handlers: Map<string, { transaction: boolean }> }).handlers.get(kind)?.transaction;

const paths: Array<[string, (...args: any[]) => unknown, { transaction?: boolean }, boolean]> = [
  ["(job, client)", async (_job: unknown, _client: unknown) => {}, {}, true],
  ["(job)", async (_job: unknown) => {}, {}, false],
  ["()", () => {}, {}, false],
  ["(job, client = x): its default hides it, so it says so", (_job: unknown, _client: unknown = null) => {}, { transaction: true }, true],
  ["(...args) with transaction: true", (..._args: unknown[]) => {}, { transaction: true }, true],
  ["(job) with transaction: true", (_job: unknown) => {}, { transaction: true }, true],
  ["(job) with transaction: false", (_job: unknown) => {}, { transaction: false }, false],
];
for (const [name, fn, options, expected] of paths) {
  test(`handle: ${name} is ${expected ? "transactional" : "job-only"}`, () => {
    const w = worker().handle("k", fn as never, options);
    assert.equal(transactional(w, "k"), expected);
  });
}

const refused: Array<[string, () => void, RegExp]> = [
  ["a handler that takes a client, with transaction: false",
    () => worker().handle("k", async (_j, _c) => {}, { transaction: false }), /needs a transaction/],
  ["transaction: 'yes'", () => worker().handle("k", async () => {}, { transaction: "yes" as never }), /true or false/],
  ["a handler that is not a function", () => worker().handle("k", "run" as never), /must be a function/],
  ["parse that is not a function", () => worker().handle("k", async () => {}, { parse: {} as never }), /parse must be/],
  ["an empty kind", () => worker().handle("", async () => {}), /non-empty/],
  ["a kind twice", () => worker().handle("k", async () => {}).handle("k", async () => {}), /has a handler already/],
];
for (const [name, register, message] of refused) {
  test(`handle refuses ${name}`, () => assert.throws(register, message));
}
