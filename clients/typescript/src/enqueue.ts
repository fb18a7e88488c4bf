// enqueue(): a job inserted by the schema's own enqueue() function, in the caller's
// transaction, so that the job exists exactly when the caller's other writes commit; and the
// batches (openBatch(), closeBatch()) jobs may join.

import { ConfigError, sqlStateOf } from "./errors.js";
import { statements, type Statements } from "./sql.js";
import { isTraceparent, loadTracing, tracingLoaded } from "./tracing.js";

/** Anything that runs a parameterised query: a pg Client, a PoolClient, a Pool. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** A job or batch id: a positive bigint, as a number (a safe integer), a bigint, or the
 *  decimal string enqueue() and openBatch() return. */
export type Id = number | bigint | string;

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
  /** The jobs this one waits for (at most 10,000; schema version 24): it is not leased before
   *  every one has completed, and becomes a dead letter of class dependency_failed if one does
   *  not. Not with uniqueKey. */
  dependsOn?: readonly Id[];
  /** The open batch (openBatch()) this job joins. Not with uniqueKey. */
  batchId?: Id;
  /** The producer's W3C traceparent ("00-<trace id>-<span id>-<flags>"), stored with the job:
   *  its attempts run in child spans of it. With @opentelemetry/api installed, it is the parent
   *  of enqueue()'s send span, and the job stores the send span's context instead (the active
   *  context is the parent when this is not given). A job with a uniqueKey stores none. */
  traceparent?: string;
  /** The oncely schema. Default "oncely". */
  schema?: string;
}

/** A batch callback, as open_batch() takes it: the job enqueued when the batch finishes, with
 *  batch_id, completed and dead added to its payload. */
export interface JobDescription {
  kind: string;
  payload?: Record<string, unknown>;
  queue?: string;
  /** Default "oncely-batch-<id>-<callback>". */
  key?: string;
  priority?: number;
  max_attempts?: number;
}

/** A batch's callbacks: onSuccess when no member was dead-lettered, onFailure when one was,
 *  onFinish either way. */
export interface BatchCallbacks {
  onSuccess?: JobDescription;
  onFailure?: JobDescription;
  onFinish?: JobDescription;
}

const MAX_PARENTS = 10_000; // the jobs_depends_on_size CHECK of schema version 24
const MAX_BIGINT = 2n ** 63n - 1n;

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
  const { key, uniqueKey, onConflict, queue, runAt, runInMs, priority, maxAttempts, dependsOn, batchId,
    traceparent } = options;
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
  if (traceparent !== undefined && !(typeof traceparent === "string" && isTraceparent(traceparent))) {
    throw new ConfigError("traceparent", "must be a W3C traceparent such as 00-<32 hex>-<16 hex>-01");
  }
  if (dependsOn !== undefined && !Array.isArray(dependsOn)) {
    throw new ConfigError("dependsOn", "must be an array of job ids");
  }
  if (dependsOn !== undefined && dependsOn.length > MAX_PARENTS) {
    throw new ConfigError("dependsOn", `holds ${dependsOn.length} job ids, more than ${MAX_PARENTS}`);
  }
  const parents = dependsOn?.map((id, i) => idParam(`dependsOn[${i}]`, id)) ?? [];
  const batch = batchId === undefined ? null : idParam("batchId", batchId);
  if (uniqueKey !== undefined && (parents.length > 0 || batch !== null)) {
    throw new ConfigError("uniqueKey", "a job with a uniqueKey cannot have dependsOn or a batchId (give it a key)");
  }
  const params = [
    kind, json, queue ?? null, key ?? null, runAt ?? null,
    runInMs === undefined ? null : Math.round(runInMs), priority ?? null, maxAttempts ?? null,
    uniqueKey ?? null, onConflict ?? null,
  ];
  // Parents and a batch only when given: a schema before version 24 has no such arguments.
  return parents.length > 0 || batch !== null ? [...params, parents.length > 0 ? parents : null, batch] : params;
}

/** `id` as the decimal text of a positive bigint; ConfigError naming `path` if it is none. */
function idParam(path: string, id: unknown): string {
  const n = typeof id === "bigint" ? id
    : typeof id === "number" && Number.isSafeInteger(id) ? BigInt(id)
    : typeof id === "string" && /^[0-9]{1,19}$/.test(id) ? BigInt(id)
    : 0n;
  if (n < 1n || n > MAX_BIGINT) {
    throw new ConfigError(path, "must be a positive integer id (a number, bigint or decimal string)");
  }
  return n.toString();
}

/**
 * Runs `text`. An error whose SQLSTATE `refusedOption` names an option for is the database
 * refusing the caller's input (schema version 24's parents and batches): a ConfigError naming
 * that option, with the server's message; any other error as it comes.
 */
async function query(
  client: Queryable,
  text: string,
  params: unknown[],
  refusedOption: (state: string, error: unknown) => string | undefined,
): Promise<{ rows: unknown[] }> {
  try {
    return await client.query(text, params);
  } catch (e) {
    const state = sqlStateOf(e);
    const path = state === undefined ? undefined : refusedOption(state, e);
    if (path !== undefined) throw new ConfigError(path, (e as Error).message, { cause: e });
    throw e;
  }
}

/** enqueue()'s refusals: a parent that is no job (23503) or is not earlier (22023); a batch that
 *  does not exist (23503, constraint jobs_batch_exists) or is closed (OC105). */
function enqueueRefusal(state: string, error: unknown): string | undefined {
  const constraint = (error as { constraint?: unknown }).constraint;
  if (state === "OC105" || (state === "23503" && constraint === "jobs_batch_exists")) return "batchId";
  return state === "23503" || state === "22023" ? "dependsOn" : undefined;
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
  const s = statementsFor(options.schema ?? "oncely");
  let tracing = tracingLoaded();
  if (tracing === undefined) tracing = await loadTracing(); // the first call only
  if (tracing === null) return insert(client, s, params, options.traceparent ?? null);
  return tracing.send({ queue: options.queue ?? "default", kind, key: options.key, traceparent: options.traceparent },
    (traceparent) => insert(client, s, params, traceparent));
}

/** Enqueues the job enqueueParams() checked, with the traceparent it is to store (none for a
 *  uniqueKey: enqueue() stores none then). */
async function insert(client: Queryable, s: Statements, params: unknown[], traceparent: string | null): Promise<string> {
  const dependent = params.length > 10; // with parents or a batch: version 24's arguments
  let result: { rows: unknown[] };
  if (traceparent !== null) {
    result = await query(client, dependent ? s.enqueueTracedDependent : s.enqueueTraced, [...params, traceparent],
      dependent ? enqueueRefusal : () => undefined);
  } else {
    result = dependent
      ? await query(client, s.enqueueDependent, params, enqueueRefusal)
      : await client.query(s.enqueue, params);
  }
  return (result.rows[0] as { id: string }).id;
}

/**
 * Opens a batch through `<schema>.open_batch()` (version 24), in the caller's transaction if
 * it has one, and returns its id as a decimal string: give it to the members' enqueue() as
 * `batchId`, then closeBatch() it. When it is closed and its last member has completed or been
 * dead-lettered, its callbacks are enqueued, once. ConfigError (path "callbacks") for a
 * callback that the database refuses as a job description.
 */
export async function openBatch(
  client: Queryable,
  callbacks: BatchCallbacks = {},
  options: Pick<EnqueueOptions, "schema"> = {},
): Promise<string> {
  const params = [callbacks.onSuccess, callbacks.onFailure, callbacks.onFinish]
    .map((d) => (d === undefined ? null : JSON.stringify(d)));
  const result = await query(client, statementsFor(options.schema ?? "oncely").openBatch, params,
    (state) => (state === "22023" ? "callbacks" : undefined));
  return (result.rows[0] as { id: string }).id;
}

/**
 * Closes batch `batchId` through `<schema>.close_batch()`: no job may join it any more, and its
 * callbacks are enqueued when its last member settles (at once if every member has). Closing a
 * closed batch does nothing; ConfigError (path "batchId") for one that does not exist.
 */
export async function closeBatch(
  client: Queryable,
  batchId: Id,
  options: Pick<EnqueueOptions, "schema"> = {},
): Promise<void> {
  await query(client, statementsFor(options.schema ?? "oncely").closeBatch, [idParam("batchId", batchId)],
    (state) => (state === "P0002" ? "batchId" : undefined));
}
