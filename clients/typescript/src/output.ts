// A job's output: what its handler resolved to, kept with the job's completed record for
// the dedup window (`oncely jobs show`). Pure: unit-tested without a database.

import { PermanentError } from "./errors.js";

/** The most JSON text an output may be: the schema's limit (output_refusal()). */
export const MAX_OUTPUT_BYTES = 65536;

/** \u0000 after an odd run of backslashes: a NUL, which Postgres jsonb cannot store. */
const ESCAPED_NUL = /(?<!\\)(?:\\\\)*\\u0000/;

/** The JSON text kept for a handler's result (null: no output, for undefined or null). Throws
 *  PermanentError, which fails the job permanently, for a result that is not JSON or is larger
 *  than 64 KiB. */
export function outputText(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    throw new PermanentError(`the handler's result is not JSON (${e instanceof Error ? e.message : String(e)}); ` +
      "return undefined or a JSON value: it is the job's output");
  }
  if (text === undefined) {
    throw new PermanentError(`the handler's result, a ${typeof value}, is not JSON; return undefined or a JSON value: ` +
      "it is the job's output");
  }
  if (ESCAPED_NUL.test(text)) throw new PermanentError("output holds a \\u0000 character, which Postgres jsonb cannot store");
  const size = Buffer.byteLength(text, "utf8");
  if (size > MAX_OUTPUT_BYTES) {
    throw new PermanentError(`output is ${size} bytes of JSON, over the limit of ${MAX_OUTPUT_BYTES} (64 KiB)`);
  }
  return text;
}
