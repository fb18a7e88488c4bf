// enqueue(): a job inserted by the schema's own enqueue() function, in the caller's
// transaction, so that the job exists exactly when the caller's other writes commit.

import { ConfigError } from "./errors.js";
import { statements, type Statements } from "./sql.js";

/** Anything that runs a parameterised query: a pg Client, a PoolClient, a Pool. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

export interface EnqueueOptions {
  /** The idempotency key: copies of a key are processed once (for ever, within the dedup window). */
  key?: string;
  /** At most one live job per (kind, uniqueKey); see onConflict. */
  uniqueKey?: string;
  /** When a live job holds (kind, uniqueKey): "skip" (default) returns its id, "replace"
   *  updates it while it waits, "error" raises unique_violation. */
  onConflict?: "skip" | "replace" | "error";
  /** Default "default". */
  queue?: string;
  /** Not run before this time. Prefer runInMs: it is counted on the database's clock. */
  runAt?: Date;
  /** Not run before now() + this many ms, on the database's clock. */
  runInMs?: number;
  /** Smaller runs first, -32768..32767. Default 0. */
  priority?: number;
  /** Overrides the queue policy's max_attempts for this job. */
  maxAttempts?: number;
  /** The oncely schema. Default "oncely". */
  schema?: string;
}

const cache = new Map<string, Statements>();
function statementsFor(schema: string): Statements {
  let s = cache.get(schema);
  if (s === undefined) cache.set(schema, (s = statements(schema)));
  return s;
}

/** The enqueue() parameters, checked (ConfigError names the bad option). Pure. */
export function enqueueParams(kind: string, payload: unknown, options: EnqueueOptions = {}): unknown[] {
  if (typeof kind !== "string" || kind === "") throw new ConfigError("kind", "must be a non-empty string");
  const json = JSON.stringify(payload ?? {});
  if (json === undefined) throw new ConfigError("payload", "must be JSON-serialisable");
  const { key, uniqueKey, onConflict, queue, runAt, runInMs, priority, maxAttempts } = options;
  if (runAt !== undefined && runInMs !== undefined) throw new ConfigError("runAt", "give runAt or runInMs, not both");
  if (runAt !== undefined && !(runAt instanceof Date && Number.isFinite(runAt.getTime()))) {
    throw new ConfigError("runAt", "must be a valid Date");
  }
  if (runInMs !== undefined && !(Number.isFinite(runInMs) && runInMs >= 0)) {
    throw new ConfigError("runInMs", "must be a finite number >= 0");
  }
  if (priority !== undefined && !(Number.isInteger(priority) && priority >= -32768 && priority <= 32767)) {
    throw new ConfigError("priority", "must be an integer in -32768..32767");
  }
  if (maxAttempts !== undefined && !(Number.isInteger(maxAttempts) && maxAttempts >= 1)) {
    throw new ConfigError("maxAttempts", "must be an integer >= 1");
  }
  if (onConflict !== undefined && !["skip", "replace", "error"].includes(onConflict)) {
    throw new ConfigError("onConflict", "must be skip, replace or error");
  }
  for (const [path, v] of [["key", key], ["uniqueKey", uniqueKey], ["queue", queue]] as const) {
    if (v !== undefined && (typeof v !== "string" || v === "")) throw new ConfigError(path, "must be a non-empty string");
  }
  return [
    kind, json, queue ?? null, key ?? null, runAt ?? null,
    runInMs === undefined ? null : Math.round(runInMs), priority ?? null, maxAttempts ?? null,
    uniqueKey ?? null, onConflict ?? null,
  ];
}

/**
 * Enqueues a job through `<schema>.enqueue()` on `client`. Call it inside your transaction
 * (BEGIN ... COMMIT on one pg client) and the job commits with your writes, or not at all.
 * Returns the job's id as a decimal string (a bigint); with a uniqueKey, the live job's id
 * when one holds the key.
 */
export async function enqueue(
  client: Queryable,
  kind: string,
  payload: unknown,
  options: EnqueueOptions = {},
): Promise<string> {
  const params = enqueueParams(kind, payload, options);
  const result = await client.query(statementsFor(options.schema ?? "oncely").enqueue, params);
  return (result.rows[0] as { id: string }).id;
}
