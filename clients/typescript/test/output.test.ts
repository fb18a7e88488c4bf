// outputText(): a handler's result as its job's output, as a table.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PermanentError } from "../src/errors.js";
import { MAX_OUTPUT_BYTES, outputText } from "../src/output.js";

const kept: Array<[string, unknown, string | null]> = [
  ["undefined: no output", undefined, null],
  ["null: no output", null, null],
  ["an object, compact", { charge: "ch_1", cents: 1250 }, '{"charge":"ch_1","cents":1250}'],
  ["an array", [1, 2.5, true, null], "[1,2.5,true,null]"],
  ["a string, as UTF-8", "déjà", '"déjà"'],
  ["false", false, "false"],
  ["0", 0, "0"],
  ["a backslash and u0000 is text", "\\u0000", '"\\\\u0000"'],
  ["exactly the limit", "x".repeat(MAX_OUTPUT_BYTES - 2), `"${"x".repeat(MAX_OUTPUT_BYTES - 2)}"`],
];
for (const [name, value, text] of kept) {
  test(`kept: ${name}`, () => assert.equal(outputText(value), text));
}

const refused: Array<[string, unknown, RegExp]> = [
  ["a bigint", 10n, /the handler's result is not JSON/],
  ["a function", () => 1, /the handler's result, a function, is not JSON/],
  ["a NUL character", "a\u0000b", /output holds a \\u0000 character/],
  ["over the limit", "x".repeat(MAX_OUTPUT_BYTES), /output is 65538 bytes of JSON, over the limit of 65536 \(64 KiB\)/],
  ["over the limit in UTF-8 bytes", "é".repeat(MAX_OUTPUT_BYTES / 2), /output is 65538 bytes/],
];
for (const [name, value, message] of refused) {
  test(`refused, the job failing permanently: ${name}`, () => {
    assert.throws(() => outputText(value), (e: unknown) => e instanceof PermanentError && message.test(e.message));
  });
}

test("a cycle is refused", () => {
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  assert.throws(() => outputText(cyclic), PermanentError);
});
