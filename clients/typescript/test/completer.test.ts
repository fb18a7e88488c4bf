// The Completer: jobs that finish while a complete_jobs() call is on its way share the next
// call; a pair the call does not return was lost; a failed call is retried, or given up.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Completer, MAX_JOBS_PER_CALL } from "../src/completer.js";

/** A complete_jobs() whose calls the test settles by hand. */
function manualStatement() {
  const calls: Array<{ ids: string[]; settle: (completed: string[] | Error) => void }> = [];
  const statement = (ids: string[]) =>
    new Promise<string[]>((resolve, reject) => {
      calls.push({ ids, settle: (r) => (r instanceof Error ? reject(r) : resolve(r)) });
    });
  return { calls, statement };
}
const tick = () => new Promise((resolve) => setImmediate(resolve));
/** Whether the job's call completed it: true, false (its lease was lost) or undefined (given up). */
const completedJob = async (id: string, call: Promise<ReadonlySet<string> | undefined>) => (await call)?.has(id);

test("one call at a time: what finishes meanwhile goes in the next call, together", async () => {
  const { calls, statement } = manualStatement();
  const completer = new Completer(statement, () => true, () => assert.fail("no error expected"));
  const first = completedJob("1", completer.complete("1", "t1"));
  await tick();
  const rest = ["2", "3", "4"].map((id) => completedJob(id, completer.complete(id, `t${id}`)));
  await tick();
  assert.deepEqual(calls.map((c) => c.ids), [["1"]]);
  calls[0]!.settle(["1"]);
  assert.equal(await first, true);
  await tick();
  assert.deepEqual(calls.map((c) => c.ids), [["1"], ["2", "3", "4"]]);
  calls[1]!.settle(["2", "4"]); // 3's lease was not ours any more
  assert.deepEqual(await Promise.all(rest), [true, false, true]);
  await completer.idle();
  assert.equal(calls.length, 2);
});

test("at most MAX_JOBS_PER_CALL jobs per call", async () => {
  const sizes: number[] = [];
  const completer = new Completer(async (ids) => (sizes.push(ids.length), ids), () => true, () => {});
  const all = Array.from({ length: MAX_JOBS_PER_CALL + 5 },
    (_, i) => completedJob(String(i), completer.complete(String(i), "t")));
  assert.ok((await Promise.all(all)).every((c) => c === true));
  assert.deepEqual(sizes, [1, MAX_JOBS_PER_CALL, 4]);
});

test("a failed call is retried with the jobs that came meanwhile, then given up when told to", async () => {
  const { calls, statement } = manualStatement();
  let keepTrying = true;
  const errors: Array<[number, boolean]> = [];
  const completer = new Completer(statement, () => keepTrying, (_e, jobs, retrying) => errors.push([jobs, retrying]),
    () => 0);
  const a = completer.complete("1", "t1");
  await tick();
  const b = completer.complete("2", "t2");
  calls[0]!.settle(new Error("connection lost"));
  while (calls.length < 2) await tick();
  assert.deepEqual(calls[1]!.ids, ["1", "2"]);
  keepTrying = false;
  calls[1]!.settle(new Error("still down"));
  assert.deepEqual(await Promise.all([a, b]), [undefined, undefined]);
  assert.deepEqual(errors, [[1, true], [2, false]]);
  await completer.idle();
});
