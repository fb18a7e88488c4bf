// What a handler's error means for its job: one pure function, decide(), maps every way an
// attempt can end to exactly one outcome, which the worker then carries out with one SQL
// function of the protocol (docs/protocol.md). The table in docs/typescript.md is this file.

/** The SQLSTATEs oncely raises itself (docs/protocol.md): match them by code, never by message. */
export const SqlState = {
  /** complete_job()/fail_job(): the lease is not the caller's any more. */
  leaseLost: "OC101",
  /** complete_job(): another copy of the key completed first. */
  alreadyProcessed: "OC102",
  /** complete_job(): the output is over 64 KiB (version 27), a limit a retry meets again. */
  outputRefused: "54000",
  /** lease_jobs(): the queue is not a lease queue (`oncely queue set Q mode=lease`). */
  notALeaseQueue: "OC103",
  /** enqueue(): the batch is closed, no job may join it any more (version 24). */
  batchClosed: "OC105",
} as const;

/** Throw it from a handler for input that can never succeed: the job becomes a dead letter
 *  of class `permanent` at once, whatever attempts it has left. */
export class PermanentError extends Error {
  override name = "PermanentError";
  /** A JSON object stored in the dead letter's `error_detail`. */
  readonly detail: Record<string, unknown> | undefined;
  constructor(message: string, options?: { cause?: unknown; detail?: Record<string, unknown> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.detail = options?.detail;
  }
}

/** Throw it from a handler to retry after `retryInMs` (a Retry-After) instead of the
 *  queue's backoff; the attempt counts, and the last one still ends as a dead letter. */
export class RetryAfterError extends Error {
  override name = "RetryAfterError";
  constructor(
    readonly retryInMs: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    if (!Number.isFinite(retryInMs) || retryInMs < 0 || retryInMs > 30 * 24 * 3600 * 1000) {
      throw new RangeError(`retryInMs must be 0..30 days in ms, not ${retryInMs}`);
    }
  }
}

/** `job.signal.reason` when renewal found the lease lost: another worker may run the job now. */
export class LeaseLostError extends Error {
  override name = "LeaseLostError";
}

/** `job.signal.reason` when the worker stops and the shutdown grace is over. */
export class ShutdownError extends Error {
  override name = "ShutdownError";
}

/** Invalid options given to Worker or enqueue(), or ids the database refused (`cause`: its
 *  error); `path` names the option. */
export class ConfigError extends Error {
  override name = "ConfigError";
  constructor(
    readonly path: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${path}: ${message}`, options?.cause === undefined ? undefined : { cause: options.cause });
  }
}

/** How an attempt ends. Exactly one SQL function carries it out (none for "completed", whose
 *  complete_job() already committed, and for "leaseLost", whose writes rolled back). */
export type Outcome =
  | { readonly type: "completed" }
  | { readonly type: "leaseLost" }
  | { readonly type: "release"; readonly why: "duplicate" | "shutdown" }
  | {
      readonly type: "fail";
      readonly retryable: boolean;
      readonly message: string;
      readonly retryInMs?: number;
      readonly detail?: Record<string, unknown>;
    };

/** The SQLSTATE of a node-postgres error, if it is one. */
export function sqlStateOf(error: unknown): string | undefined {
  if (typeof error === "object" && error !== null && "code" in error) {
    const code = (error as { code: unknown }).code;
    if (typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)) return code;
  }
  return undefined;
}

const MAX_MESSAGE = 2000;

/** One line for `errors[]`: "Name: message", cut to 2,000 characters. */
export function describe(error: unknown): string {
  let text: string;
  if (error instanceof Error) text = `${error.name}: ${error.message}`;
  else if (typeof error === "string") text = error;
  else {
    try {
      text = `non-Error thrown: ${JSON.stringify(error)}`;
    } catch {
      text = `non-Error thrown: ${String(error)}`;
    }
  }
  return text.length > MAX_MESSAGE ? `${text.slice(0, MAX_MESSAGE - 1)}…` : text;
}

/**
 * The outcome of an attempt whose handler or completion threw `error`, given the reason its
 * signal was aborted with (undefined when it was not).
 *
 * Order matters: what the database said comes first (OC101: our writes rolled back and the job
 * is not ours; OC102: a copy won), then why the worker aborted the handler (the lease is lost:
 * nothing to record; shutdown: give the job back, its attempt not charged), then what the
 * handler threw (PermanentError: dead letter now; RetryAfterError: retry then; anything
 * else: retry with the queue's backoff).
 */
export function decide(error: unknown, abortReason?: unknown): Outcome {
  const state = sqlStateOf(error);
  if (state === SqlState.leaseLost) return { type: "leaseLost" };
  if (state === SqlState.alreadyProcessed) return { type: "release", why: "duplicate" };
  if (abortReason instanceof LeaseLostError) return { type: "leaseLost" };
  if (abortReason instanceof ShutdownError) return { type: "release", why: "shutdown" };
  const message = describe(error);
  if (state === SqlState.outputRefused) return { type: "fail", retryable: false, message };
  if (error instanceof PermanentError) {
    return error.detail === undefined
      ? { type: "fail", retryable: false, message }
      : { type: "fail", retryable: false, message, detail: error.detail };
  }
  if (error instanceof RetryAfterError) return { type: "fail", retryable: true, message, retryInMs: error.retryInMs };
  return { type: "fail", retryable: true, message };
}
