// The Worker's options: what each means, its default, and validate(), which turns what the
// caller gave into a complete, checked value (ConfigError names the option). Pure: no I/O.

import type { Pool } from "pg";
import { ConfigError } from "./errors.js";

/** Where log lines go. Fields are key=value context (job id, queue, ...); never a secret. */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export interface QueueOptions {
  /** Handlers of this queue that may run at once, 1..1000. Default 1. */
  concurrency?: number;
}

export interface WorkerOptions {
  /** A libpq URL; the worker makes its own pool of Σ concurrency + 4 connections. */
  connectionString?: string;
  /** Or your pool: it must hold Σ concurrency + 4 (a warning says so when it is smaller). */
  pool?: Pool;
  /** The oncely schema. Default "oncely". */
  schema?: string;
  /** The lease queues to serve (`oncely queue set Q mode=lease`) and their concurrency. */
  queues: Record<string, QueueOptions>;
  /** Names this worker in jobs.lease_holder. Default "ts-<hostname>-<pid>". */
  name?: string;
  /** The longest wait between two polls when no NOTIFY comes, ms (a ±10 % jitter is added). Default 1000. */
  pollIntervalMs?: number;
  /** How often the held leases are renewed, ms; keep it under a third of the shortest lease (3 s). Default 1000. */
  renewIntervalMs?: number;
  /** The lease to take, ms (3,000..3,600,000); default: each queue's policy. */
  leaseMs?: number;
  /** Jobs leased ahead per queue, waiting for a free slot (their leases renewed), so that leases
   *  come in batches: a queue leases again once half of that room is free (in lease_jobs()
   *  calls of up to 1000 each). 0..10000; default: each queue's concurrency. 0 leases only
   *  for free slots, as does a queue with limits across workers, whatever this says. */
  prefetch?: number;
  /** stop()'s default grace, ms. Default 10,000. */
  shutdownGraceMs?: number;
  /** On SIGTERM/SIGINT, stop() with the default grace. Default false. */
  installSignalHandlers?: boolean;
  /** Default: console, one line per event. */
  logger?: Logger;
}

export interface ValidOptions {
  readonly connectionString: string | undefined;
  readonly pool: Pool | undefined;
  readonly schema: string;
  readonly queues: ReadonlyMap<string, { readonly concurrency: number }>;
  readonly name: string;
  readonly pollIntervalMs: number;
  readonly renewIntervalMs: number;
  readonly leaseMs: number | undefined;
  readonly prefetch: number | undefined;
  readonly shutdownGraceMs: number;
  readonly installSignalHandlers: boolean;
  readonly logger: Logger;
}

/** Connections a worker holds at most: one per running handler, the LISTEN client, and one
 *  that leasing and renewal share (short statements, never inside a handler's transaction). */
export function connectionsNeeded(queues: ReadonlyMap<string, { readonly concurrency: number }>): number {
  let sum = 0;
  for (const q of queues.values()) sum += q.concurrency;
  return sum + 4;
}

function integerIn(path: string, value: unknown, min: number, max: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(path, `must be an integer in ${min}..${max}, not ${JSON.stringify(value)}`);
  }
  return value;
}

function name(path: string, value: unknown, maxBytes: number): string {
  if (typeof value !== "string" || value === "" || Buffer.byteLength(value) > maxBytes) {
    throw new ConfigError(path, `must be a non-empty string of at most ${maxBytes} bytes`);
  }
  return value;
}

const KNOWN = new Set([
  "connectionString", "pool", "schema", "queues", "name", "pollIntervalMs", "renewIntervalMs",
  "leaseMs", "prefetch", "shutdownGraceMs", "installSignalHandlers", "logger",
]);

/** Checks every option and fills the defaults; throws ConfigError naming the first bad one. */
export function validate(options: WorkerOptions, defaults: { name: string; logger: Logger }): ValidOptions {
  if (typeof options !== "object" || options === null) throw new ConfigError("options", "must be an object");
  for (const key of Object.keys(options)) {
    if (!KNOWN.has(key)) throw new ConfigError(key, "unknown option");
  }
  const { connectionString, pool } = options;
  if ((connectionString === undefined) === (pool === undefined)) {
    throw new ConfigError("connectionString", "give exactly one of connectionString and pool");
  }
  if (connectionString !== undefined && (typeof connectionString !== "string" || connectionString === "")) {
    throw new ConfigError("connectionString", "must be a non-empty string");
  }
  const schema = name("schema", options.schema ?? "oncely", 63);
  if (typeof options.queues !== "object" || options.queues === null || Object.keys(options.queues).length === 0) {
    throw new ConfigError("queues", "name at least one queue: { queues: { emails: { concurrency: 10 } } }");
  }
  const queues = new Map<string, { concurrency: number }>();
  for (const [queue, q] of Object.entries(options.queues)) {
    name(`queues.${queue}`, queue, 128);
    if (typeof q !== "object" || q === null) throw new ConfigError(`queues.${queue}`, "must be an object");
    for (const key of Object.keys(q)) {
      if (key !== "concurrency") throw new ConfigError(`queues.${queue}.${key}`, "unknown option");
    }
    queues.set(queue, { concurrency: integerIn(`queues.${queue}.concurrency`, q.concurrency ?? 1, 1, 1000) });
  }
  const leaseMs =
    options.leaseMs === undefined ? undefined : integerIn("leaseMs", options.leaseMs, 3000, 3_600_000);
  const renewIntervalMs = integerIn("renewIntervalMs", options.renewIntervalMs ?? 1000, 100, 1_200_000);
  if (leaseMs !== undefined && renewIntervalMs * 3 > leaseMs) {
    throw new ConfigError("renewIntervalMs", `must be at most a third of leaseMs (${leaseMs})`);
  }
  const logger = options.logger ?? defaults.logger;
  for (const level of ["debug", "info", "warn", "error"] as const) {
    if (typeof logger[level] !== "function") throw new ConfigError(`logger.${level}`, "must be a function");
  }
  return {
    connectionString,
    pool,
    schema,
    queues,
    name: name("name", options.name ?? defaults.name, 200),
    pollIntervalMs: integerIn("pollIntervalMs", options.pollIntervalMs ?? 1000, 10, 3_600_000),
    renewIntervalMs,
    leaseMs,
    prefetch: options.prefetch === undefined ? undefined : integerIn("prefetch", options.prefetch, 0, 10000),
    shutdownGraceMs: integerIn("shutdownGraceMs", options.shutdownGraceMs ?? 10_000, 0, 86_400_000),
    installSignalHandlers: options.installSignalHandlers ?? false,
    logger,
  };
}

/** The default logger: one line per event on the console, `oncely: message key=value ...`. */
export const consoleLogger: Logger = {
  debug: () => {},
  info: (m, f) => console.info(line(m, f)),
  warn: (m, f) => console.warn(line(m, f)),
  error: (m, f) => console.error(line(m, f)),
};

export function line(message: string, fields?: Record<string, unknown>): string {
  let text = `oncely: ${message}`;
  for (const [k, v] of Object.entries(fields ?? {})) {
    const s = typeof v === "string" ? v : JSON.stringify(v);
    text += ` ${k}=${s !== undefined && /[\s"=]/.test(s) ? JSON.stringify(s) : s}`;
  }
  return text;
}
