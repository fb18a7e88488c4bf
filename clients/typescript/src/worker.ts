// The Worker: leases jobs of its lease queues with lease_jobs(), runs their handlers, renews
// every held lease from one timer, and gives running jobs back with release_jobs() when it
// stops. The SQL worker protocol is docs/protocol.md; how a thrown error becomes an outcome is
// decide() in errors.ts. Two kinds of handler:
// - a transactional handler, `(job, client)`, runs inside a transaction that ends with
//   complete_job(): its writes and the completion commit together, or neither (a commit per job);
// - a job-only handler, `(job)`, has no writes to fence: it runs holding no connection, and the
//   Completer completes the jobs that finished meanwhile with one complete_jobs() call.
//
// Connections: one per running transactional handler (held from BEGIN to COMMIT), one LISTEN
// client, one kept for the leases and one for complete_jobs() (dedicated.ts says why), and
// one for the other short statements (renewal, a job-only handler's failure, the final
// release): a pool of Σ concurrency + 4 never makes a handler wait for a connection, and a
// worker whose handlers are all job-only opens about four.

import { hostname } from "node:os";
import pg from "pg";
import type { Notification, Pool, PoolClient } from "pg";
import {
  LeaseLostError, PermanentError, ShutdownError, decide, describe, sqlStateOf, SqlState, type Outcome,
} from "./errors.js";
import { connectionsNeeded, consoleLogger, validate, type ValidOptions, type WorkerOptions } from "./options.js";
import { Completer } from "./completer.js";
import { outputText } from "./output.js";
import { DedicatedClient } from "./dedicated.js";
import { statements, type Statements } from "./sql.js";
import { loadTracing, type Attempt, type SpanOutcome, type Tracing } from "./tracing.js";

/** One leased job, as a handler sees it. */
export interface Job<P = unknown> {
  /** The job's id: a bigint, as its decimal string. */
  readonly id: string;
  /** Its idempotency key (the id, when the producer gave none). */
  readonly key: string;
  readonly kind: string;
  readonly queue: string;
  readonly payload: P;
  /** This attempt's number, from 1. */
  readonly attempt: number;
  /** The lease's fencing token: a bigint, as its decimal string. */
  readonly leaseToken: string;
  readonly leaseExpiresAt: Date;
  /** The producer's W3C traceparent, or null. */
  readonly traceparent: string | null;
  /** Aborted when renewal finds the lease lost (reason: LeaseLostError) or when the worker
   *  stops and the shutdown grace is over (reason: ShutdownError). Pass it to what you await. */
  readonly signal: AbortSignal;
}

/** Runs one job. `client` is inside the transaction that complete_job() ends: write the job's
 *  effects through it, and they commit with the completion or not at all. Don't COMMIT or
 *  ROLLBACK on it, and don't keep it after the returned promise settles.
 *  A handler declared with one parameter, `(job) => ...`, gets no client: see HandleOptions.transaction.
 *  What it resolves to (a JSON value; undefined: none) is the job's output, kept with its
 *  completed record: at most 64 KiB of JSON, or the job fails permanently. */
export type Handler<P = unknown> = (job: Job<P>, client: PoolClient) => Promise<unknown> | unknown;

export interface HandleOptions<P> {
  /** Checks and converts the payload before the handler runs; what it throws makes the job a
   *  dead letter at once (bad input never succeeds), as does an unknown kind. */
  parse?: (payload: unknown) => P;
  /** true: the handler runs in a transaction of its own that commits with complete_job() (its
   *  writes through `client` are the job's effects). false: it is job-only: it runs holding no
   *  connection, and its job is completed with others in one complete_jobs() call, for work
   *  with no database writes to fence (mail, webhooks with an idempotency key, no-ops).
   *  Default: from the handler's declared parameters, true when it declares `client`. */
  transaction?: boolean;
}

export interface StopOptions {
  /** How long running handlers may go on before their signal is aborted; default the
   *  worker's shutdownGraceMs. */
  graceMs?: number;
}

interface Registered {
  readonly fn: Handler<any>;
  readonly parse: ((payload: unknown) => unknown) | undefined;
  readonly transaction: boolean;
}

/** A job the worker holds a lease on, from lease_jobs() until it is settled or given back.
 *  Its AbortController is made when the handler first reads `job.signal` or when the job is
 *  aborted: most handlers never look, and a controller made for every job was an eighth of
 *  the worker's CPU in a no-op burn-down. */
class Held {
  readonly job: LeasedJob;
  /** waiting: leased ahead, for a free slot; running: its handler runs; completing: its
   *  handler returned and its completion is on its way (renewal must not abort it). */
  state: "waiting" | "running" | "completing" = "waiting";
  /** Its queue's slot was given back (a job-only handler's, before its completion). */
  slotFreed = false;
  /** Settles once the job is settled or given back. */
  done: Promise<void> = Promise.resolve();
  /** Its attempt's spans, when OpenTelemetry is installed (tracing.ts). */
  attempt: Attempt | undefined;
  private controller: AbortController | undefined;

  constructor(private readonly row: LeasedRow, queue: string) {
    this.job = new LeasedJob(this, row, queue, row.payload);
  }

  /** Starts its attempt's process span. */
  trace(tracing: Tracing): void {
    const { row, job } = this;
    this.attempt = tracing.attempt({ id: row.id, kind: row.kind, queue: job.queue, attempt: row.attempt,
      producerKey: row.idempotency_key, traceparent: row.trace_context });
  }

  /** Its job with the payload that the kind's parse() made of the row's. */
  jobWithPayload<P>(payload: P): LeasedJob<P> {
    return new LeasedJob(this, this.row, this.job.queue, payload);
  }

  get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  get aborted(): boolean {
    return this.controller?.signal.aborted ?? false;
  }

  /** The reason it was aborted with, or undefined. */
  get abortReason(): unknown {
    return this.aborted ? this.controller!.signal.reason : undefined;
  }

  abort(reason: Error): void {
    (this.controller ??= new AbortController()).abort(reason);
  }
}

/** A leased job as its handler sees it: the row's values, and the lease's signal. One object
 *  per job, its getters on the prototype: a burn-down makes tens of thousands a second. */
class LeasedJob<P = unknown> implements Job<P> {
  readonly id: string;
  readonly key: string;
  readonly kind: string;
  readonly attempt: number;
  readonly leaseToken: string;
  readonly traceparent: string | null;
  readonly #held: Held;
  readonly #expiresMs: number;

  constructor(held: Held, row: LeasedRow, readonly queue: string, readonly payload: P) {
    this.#held = held;
    this.id = row.id;
    this.key = row.idempotency_key ?? row.id;
    this.kind = row.kind;
    this.attempt = row.attempt;
    this.leaseToken = row.lease_token;
    this.traceparent = row.trace_context;
    this.#expiresMs = row.lease_expires_ms;
  }

  get leaseExpiresAt(): Date {
    return new Date(this.#expiresMs);
  }

  get signal(): AbortSignal {
    return this.#held.signal;
  }
}

interface LeasedRow {
  id: string;
  kind: string;
  payload: unknown;
  idempotency_key: string | null;
  attempt: number;
  lease_token: string;
  lease_expires_ms: number;
  trace_context: string | null;
}

/** A timer-based wait that wake() cuts short; a wake() while nobody waits is kept for the next wait. */
class Waker {
  private pending = false;
  private wakeUp: (() => void) | undefined;

  wake(): void {
    this.pending = true;
    this.wakeUp?.();
  }

  async wait(ms: number): Promise<void> {
    if (!this.pending) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, ms);
        const self = this;
        function done() {
          clearTimeout(timer);
          self.wakeUp = undefined;
          resolve();
        }
        this.wakeUp = done;
      });
    }
    this.pending = false;
  }
}

/** Resolves when `promise` settles or after `ms`, whichever is first; leaves no timer behind. */
async function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    promise.then(() => {}, () => {}),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
  ]);
  clearTimeout(timer);
}

export class Worker {
  private readonly o: ValidOptions;
  private readonly sql: Statements;
  private readonly pool: Pool;
  private readonly ownsPool: boolean;
  private readonly handlers = new Map<string, Registered>();
  private readonly held = new Map<string, Held>(); // by lease token
  private readonly busy = new Map<string, number>(); // running handlers per queue
  private readonly waiting = new Map<string, Held[]>(); // leased ahead, per queue, in lease order
  private readonly completer: Completer;
  private readonly leases: DedicatedClient; // lease_jobs()
  private readonly completions: DedicatedClient; // the Completer's complete_jobs()
  private readonly waker = new Waker();
  private state: "idle" | "running" | "stopping" | "stopped" = "idle";
  private loop: Promise<void> | undefined;
  private listener: PoolClient | undefined;
  private listenerTimer: NodeJS.Timeout | undefined;
  private renewTimer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private readonly leaseErrorsLogged = new Set<string>();
  private hasLimitsRetryIn = true; // until a schema before version 23 says otherwise
  private tracing: Tracing | null = null; // @opentelemetry/api, loaded before the first lease when installed
  // Per queue: whether it has limits across workers, read before its first lease (and set
  // when limits_retry_in() says they held a lease back). Such a queue leases nothing ahead.
  private readonly limited = new Map<string, boolean>();
  private onSignal: ((signal: NodeJS.Signals) => void) | undefined;
  private resolveStopped!: () => void;
  /** Settles when the worker has stopped, whoever stopped it (stop() or a signal). */
  readonly stopped: Promise<void> = new Promise((resolve) => (this.resolveStopped = resolve));

  /** @throws ConfigError naming the first invalid option. */
  constructor(options: WorkerOptions) {
    this.o = validate(options, { name: `ts-${hostname()}-${process.pid}`, logger: consoleLogger });
    this.sql = statements(this.o.schema);
    this.completer = new Completer(
      async (ids, tokens, outputs) =>
        (outputs.some((o) => o !== null)
          ? await this.completions.query<{ id: string }>(this.sql.completeJobsWithOutputs,
            [bigintArray(ids), bigintArray(tokens), outputs])
          : await this.completions.query<{ id: string }>(this.sql.completeJobs, [bigintArray(ids), bigintArray(tokens)]))
          .rows.map((r) => r.id),
      () => this.state === "running",
      (e, jobs, retrying) => this.o.logger.error(
        retrying ? "complete_jobs failed; retrying" : "complete_jobs failed; the leases will expire and the jobs run again",
        { jobs, error: describe(e) }),
    );
    const needed = connectionsNeeded(this.o.queues);
    if (this.o.pool !== undefined) {
      this.pool = this.o.pool;
      this.ownsPool = false;
      const max = (this.pool as unknown as { options?: { max?: number } }).options?.max ?? 10;
      if (max < needed) {
        this.o.logger.warn("the pool is smaller than the worker needs: handlers will wait for connections",
          { pool_max: max, needed });
      }
    } else {
      this.pool = new pg.Pool({
        connectionString: this.o.connectionString,
        max: needed,
        application_name: `oncely ${this.o.name}`.slice(0, 63),
      });
      this.ownsPool = true;
      // An idle connection that dies is removed by the pool; without a listener it would throw.
      this.pool.on("error", (e) => this.o.logger.warn("an idle connection failed", { error: describe(e) }));
    }
    this.leases = new DedicatedClient(this.pool);
    this.completions = new DedicatedClient(this.pool);
  }

  /** Registers the handler of a job kind. Only before start(); one handler per kind. */
  handle<P = unknown>(kind: string, fn: Handler<P>, options: HandleOptions<P> = {}): this {
    if (this.state !== "idle") throw new Error("handle() must be called before start()");
    if (typeof kind !== "string" || kind === "") throw new TypeError("kind must be a non-empty string");
    if (this.handlers.has(kind)) throw new Error(`kind ${JSON.stringify(kind)} has a handler already`);
    if (typeof fn !== "function") throw new TypeError(`kind ${JSON.stringify(kind)}: the handler must be a function`);
    if (typeof options !== "object" || options === null) throw new TypeError("handle()'s options must be an object");
    if (options.parse !== undefined && typeof options.parse !== "function") {
      throw new TypeError(`kind ${JSON.stringify(kind)}: parse must be a function`);
    }
    if (options.transaction !== undefined && typeof options.transaction !== "boolean") {
      throw new TypeError(`kind ${JSON.stringify(kind)}: transaction must be true or false`);
    }
    if (options.transaction === false && fn.length >= 2) {
      throw new Error(`kind ${JSON.stringify(kind)}: a handler that takes a client needs a transaction`);
    }
    // fn.length counts the parameters before the first one with a default or a rest parameter:
    // a handler that declares `client` that way says so with { transaction: true }.
    this.handlers.set(kind, { fn, parse: options.parse, transaction: options.transaction ?? fn.length >= 2 });
    return this;
  }

  /** Starts leasing in the background and returns at once. Once only. */
  start(): void {
    if (this.state !== "idle") throw new Error(`start(): the worker is ${this.state}`);
    this.state = "running";
    this.o.logger.info("worker started", {
      name: this.o.name, schema: this.o.schema,
      queues: Object.fromEntries([...this.o.queues].map(([q, c]) => [q, c.concurrency])),
      kinds: [...this.handlers.keys()],
    });
    if (this.o.installSignalHandlers) {
      this.onSignal = (signal) => {
        this.o.logger.info("signal received: stopping", { signal, grace_ms: this.o.shutdownGraceMs });
        void this.stop();
      };
      process.once("SIGTERM", this.onSignal);
      process.once("SIGINT", this.onSignal);
    }
    void this.listen();
    this.scheduleRenewal();
    this.loop = this.leaseLoop();
  }

  /**
   * Stops leasing, lets running handlers finish for `graceMs`, then aborts the signals of the
   * rest, waits up to 1 s for them to settle and gives back whatever is still held with
   * release_jobs() (their attempts not charged). Ends the pool if the worker made it.
   * Idempotent: later calls return the first call's promise. Safe before start().
   */
  stop(options: StopOptions = {}): Promise<void> {
    this.stopping ??= this.shutdown(options.graceMs ?? this.o.shutdownGraceMs).finally(() => this.resolveStopped());
    return this.stopping;
  }

  // -- leasing --

  /** Job-only handlers need complete_jobs() (schema version 20): without it, their jobs would
   *  run and never complete. Checked before the first lease; false (logged) stops the worker. */
  private async schemaServesHandlers(): Promise<boolean> {
    if ([...this.handlers.values()].every((h) => h.transaction)) return true;
    try {
      if ((await this.pool.query<{ ok: boolean }>(this.sql.hasCompleteJobs)).rows[0]?.ok) return true;
      this.o.logger.error("job-only handlers need complete_jobs(), schema version 20: stopping",
        { schema: this.o.schema, hint: `ONCELY_SCHEMA=${this.o.schema} oncely migrate` });
      return false;
    } catch (e) { // the database is not there yet: lease_jobs() will say so at each poll
      this.o.logger.warn("could not check the schema's version", { error: describe(e) });
      return true;
    }
  }

  /** Jobs a queue may hold beyond its running handlers, waiting for a slot: none under limits
   *  across workers (or while that is unknown), where a job leased ahead would hold one of the
   *  queue's slots (its live lease counts as running) and its start in the rate window while
   *  it waits here unstarted. */
  private ahead(queue: string, concurrency: number): number {
    return this.limited.get(queue) === false ? this.o.prefetch ?? concurrency : 0;
  }

  /** Reads whether the queue has limits across workers (limits set later are seen at the next
   *  start, or once limits_retry_in() says they held a lease back). Left unknown when it fails:
   *  asked again before the next lease. */
  private async checkLimits(queue: string): Promise<void> {
    try {
      const limited = (await this.pool.query<{ limited: boolean }>(this.sql.hasLimits, [queue])).rows[0]?.limited;
      this.limited.set(queue, limited === true);
      if (limited === true && this.o.prefetch) {
        this.o.logger.warn(`queue '${queue}' has limits across workers: jobs are not leased ahead (prefetch ignored for it)`,
          { queue });
      }
    } catch (e) {
      if (sqlStateOf(e) === undefinedFunction) this.limited.set(queue, false); // a schema before version 23
      else this.o.logger.debug("queue_limits_held failed; leasing nothing ahead until it works", { queue, error: describe(e) });
    }
  }

  private async leaseLoop(): Promise<void> {
    this.tracing = await loadTracing();
    if (!(await this.schemaServesHandlers())) {
      void this.stop();
      return;
    }
    while (this.state === "running") {
      // Woken by a NOTIFY for our queues, a freed slot or stop(); else the poll (±10 %), or
      // sooner when a queue's limits held a lease back and say when they may let one in.
      let waitMs = this.o.pollIntervalMs * (0.9 + Math.random() * 0.2);
      for (const [queue, { concurrency }] of this.o.queues) {
        if (this.state !== "running") break;
        if (!this.limited.has(queue)) await this.checkLimits(queue);
        const ahead = this.ahead(queue, concurrency);
        const room = concurrency + ahead - (this.busy.get(queue) ?? 0) - (this.waiting.get(queue)?.length ?? 0);
        // With jobs leased ahead, lease again once half of that room is free: leases in batches.
        if (room >= Math.max(1, Math.floor(ahead / 2))) {
          waitMs = Math.min(waitMs, await this.lease(queue, Math.min(room, 1000)));
        }
      }
      await this.waker.wait(waitMs);
    }
  }

  /** Leases up to `maxJobs` jobs of the queue and starts them; returns the longest wait
   *  before the queue should be leased again: Infinity, unless its limits say (below). */
  private async lease(queue: string, maxJobs: number): Promise<number> {
    let rows: LeasedRow[];
    try {
      rows = (await this.leases.query<LeasedRow>(this.sql.leaseJobs, [queue, maxJobs, this.o.leaseMs ?? null, this.o.name]))
        .rows;
      this.leaseErrorsLogged.delete(queue);
    } catch (e) {
      if (!this.leaseErrorsLogged.has(queue)) { // once until it works again, not every poll
        this.leaseErrorsLogged.add(queue);
        const hint = sqlStateOf(e) === SqlState.notALeaseQueue ? `oncely queue set ${queue} mode=lease` : undefined;
        this.o.logger.error("lease_jobs failed; retrying at each poll", { queue, error: describe(e), hint });
      }
      return Infinity;
    }
    if (this.state !== "running") { // stop() came while leasing: give them straight back
      await this.release(rows.map((r) => r.lease_token), "stopping");
      return Infinity;
    }
    const waiting = this.waiting.get(queue) ?? [];
    this.waiting.set(queue, waiting);
    for (const row of rows) {
      const entry = new Held(row, queue);
      this.held.set(row.lease_token, entry);
      waiting.push(entry);
    }
    this.startWaiting(queue);
    return rows.length < maxJobs ? await this.limitsRetryIn(queue) : Infinity;
  }

  /** After a lease that came back short: in how many ms the queue's limits may let a lease
   *  find room (no commit announces a rate window moving on or a lease expiring, so no NOTIFY
   *  comes); Infinity when it has no limits or nothing holds it back but the lack of jobs. */
  private async limitsRetryIn(queue: string): Promise<number> {
    if (!this.hasLimitsRetryIn) return Infinity;
    try {
      const ms = (await this.leases.query<{ ms: number | null }>(this.sql.limitsRetryIn, [queue])).rows[0]?.ms ?? null;
      if (ms === null) return Infinity;
      if (this.limited.get(queue) === false) { // only limits hold a lease back: the queue has some now
        this.limited.set(queue, true);
        if (this.o.prefetch !== 0) {
          this.o.logger.info("the queue's limits across workers held a lease back: no more jobs leased ahead for it",
            { queue });
        }
      }
      return ms;
    } catch (e) {
      if (sqlStateOf(e) === undefinedFunction) this.hasLimitsRetryIn = false; // a schema before version 23: no rates
      else this.o.logger.warn("limits_retry_in failed; leasing again at the poll", { queue, error: describe(e) });
      return Infinity;
    }
  }

  /** Starts the queue's waiting jobs while it has free slots. */
  private startWaiting(queue: string): void {
    const waiting = this.waiting.get(queue);
    const concurrency = this.o.queues.get(queue)?.concurrency ?? 0;
    while (this.state === "running" && waiting !== undefined && waiting.length > 0 &&
           (this.busy.get(queue) ?? 0) < concurrency) {
      this.launch(queue, waiting.shift()!);
    }
  }

  private launch(queue: string, entry: Held): void {
    entry.state = "running";
    this.busy.set(queue, (this.busy.get(queue) ?? 0) + 1);
    entry.done = this.runOne(entry);
  }

  /** Gives the job's slot back (once) and starts what waits for one. */
  private freeSlot(entry: Held): void {
    if (entry.slotFreed) return;
    entry.slotFreed = true;
    const queue = entry.job.queue;
    this.busy.set(queue, (this.busy.get(queue) ?? 1) - 1);
    this.startWaiting(queue);
    this.waker.wake(); // room to lease into
  }

  // -- running one job --

  /** Runs the job and settles it; never rejects. */
  private async runOne(entry: Held): Promise<void> {
    if (this.tracing !== null) entry.trace(this.tracing);
    try {
      if (this.handlers.get(entry.job.kind)?.transaction === true) await this.runInTransaction(entry);
      else await this.runJobOnly(entry);
    } catch (e) {
      this.o.logger.error("job: unexpected error", { ...ref(entry.job), error: describe(e) });
    } finally {
      entry.attempt?.finish(undefined); // ended already, unless something above threw
      this.held.delete(entry.job.leaseToken);
      this.freeSlot(entry);
    }
  }

  /** Runs the handler, with its attempt's process span active when there is one. */
  private async run(entry: Held, client: PoolClient | undefined): Promise<string | null> {
    const { attempt } = entry;
    return outputText(
      await (attempt === undefined ? this.invoke(entry, client) : attempt.run(() => this.invoke(entry, client))));
  }

  /** Ends the attempt's spans with what its settlement said. */
  private finishAttempt(entry: Held, outcome: Outcome, failure: unknown, settled: SpanOutcome | undefined): void {
    const { attempt } = entry;
    if (attempt === undefined) return;
    if (outcome.type === "fail") {
      const errorType = !this.handlers.has(entry.job.kind) ? "unknown_kind"
        : failure instanceof PermanentError ? "permanent"
        : sqlStateOf(failure) === queryCanceled ? "timeout"
        : "retryable";
      attempt.finish(settled, errorType, outcome.message);
    } else if (outcome.type === "leaseLost") {
      attempt.finish("lease_stale", undefined, failure === undefined ? "the lease was lost" : describe(failure));
    } else {
      attempt.finish(settled);
    }
  }

  /** A job-only handler, or no handler at all (a permanent failure that needs no connection). */
  private async runJobOnly(entry: Held): Promise<void> {
    let failure: unknown;
    let failed = false;
    let output: string | null = null;
    try {
      output = await this.run(entry, undefined);
    } catch (e) {
      [failure, failed] = [e, true];
    }
    this.freeSlot(entry); // the slot is free while the completion is on its way
    if (failed) {
      const outcome = decide(failure, entry.abortReason);
      this.finishAttempt(entry, outcome, failure, await this.settle(entry, outcome, failure, this.pool));
      return;
    }
    entry.state = "completing";
    entry.attempt?.settling();
    const completed = await this.completer.complete(entry.job.id, entry.job.leaseToken, output);
    if (completed === undefined) { // given up (logged): its lease expires, it runs again
      entry.attempt?.finish(undefined, undefined, "complete_jobs failed");
      return;
    }
    if (completed.has(entry.job.id)) {
      this.o.logger.debug("job completed", ref(entry.job));
      entry.attempt?.finish("completed");
    } else {
      this.o.logger.warn("lease lost before the job's completion: another attempt owns it", ref(entry.job));
      entry.attempt?.stale();
      entry.attempt?.finish("lease_stale", undefined, "the lease was lost before the completion");
    }
  }

  /** Runs the job's handler (after its kind and payload checks); `client` for a transactional one. */
  private invoke(entry: Held, client: PoolClient | undefined): Promise<unknown> | unknown {
    const registered = this.handlers.get(entry.job.kind);
    if (registered === undefined) throw new PermanentError(`no handler for kind ${JSON.stringify(entry.job.kind)}`);
    let job: Job = entry.job;
    if (registered.parse !== undefined) {
      let payload: unknown;
      try {
        payload = registered.parse(job.payload);
      } catch (e) {
        throw new PermanentError(`bad payload: ${describe(e)}`, { cause: e });
      }
      if (payload !== job.payload) job = entry.jobWithPayload(payload);
    }
    // A job-only handler declares no client: it is never passed one.
    return registered.fn(job, client as PoolClient);
  }

  private async runInTransaction(entry: Held): Promise<void> {
    const { job } = entry;
    let client: PoolClient;
    try {
      client = await this.pool.connect();
    } catch (e) {
      // Its lease expires and the next lease runs it again.
      this.o.logger.error("no connection for a job; its lease will expire", { ...ref(job), error: describe(e) });
      return;
    }
    let broken: Error | undefined;
    const onError = (e: Error) => (broken = e); // a checked-out client's error has no other listener
    client.on("error", onError);
    try {
      let outcome: Outcome;
      let failure: unknown;
      try {
        await client.query("BEGIN");
        const output = await this.run(entry, client);
        entry.state = "completing";
        entry.attempt?.settling();
        await client.query(this.sql.completeJob, [job.id, job.leaseToken, output]);
        await client.query("COMMIT");
        outcome = { type: "completed" };
      } catch (e) {
        failure = e;
        entry.state = "running";
        await client.query("ROLLBACK").catch((r: Error) => (broken ??= r));
        outcome = decide(e, entry.abortReason);
      }
      const settled = await this.settle(entry, outcome, failure, broken === undefined ? client : this.pool);
      this.finishAttempt(entry, outcome, failure, settled);
    } finally {
      client.off("error", onError);
      client.release(broken);
    }
  }

  /** Carries out an outcome with its one SQL function, and logs it once. Returns what its
   *  attempt's spans say of it (undefined: given back, or its settlement failed). */
  private async settle(entry: Held, outcome: Outcome, failure: unknown, db: Pool | PoolClient,
  ): Promise<SpanOutcome | undefined> {
    const { job, attempt } = entry;
    switch (outcome.type) {
      case "completed":
        this.o.logger.debug("job completed", ref(job));
        return "completed";
      case "leaseLost":
        this.o.logger.warn("lease lost: the job's writes rolled back; another attempt owns it",
          { ...ref(job), error: describe(failure) });
        if (sqlStateOf(failure) === SqlState.leaseLost) attempt?.stale(); // the fenced completion refused it
        return "lease_stale";
      case "release":
        if (outcome.why === "duplicate") this.o.logger.debug("duplicate: its key was processed already", ref(job));
        else this.o.logger.info("stopped by shutdown: giving the job back", ref(job));
        attempt?.settling();
        await this.release([job.leaseToken], outcome.why, db);
        return outcome.why === "duplicate" ? "deduplicated" : undefined;
      case "fail":
        attempt?.settling();
        try {
          const r = await db.query<{ next: string }>(this.sql.failJob, [
            job.id, job.leaseToken, outcome.message, outcome.retryable, outcome.retryInMs ?? null,
            outcome.detail === undefined ? null : JSON.stringify(outcome.detail),
          ]);
          const next = r.rows[0]?.next;
          const fields = { ...ref(job), next, error: outcome.message };
          if (next === "dead") this.o.logger.error("job failed: dead letter", fields);
          else this.o.logger.warn("job failed: it will retry", fields);
          return next === "dead" ? "dead_lettered" : "retried";
        } catch (e) {
          if (sqlStateOf(e) === SqlState.leaseLost) {
            this.o.logger.warn("lease lost before the failure was recorded", { ...ref(job), error: outcome.message });
            attempt?.stale();
            return "lease_stale";
          }
          this.o.logger.error("fail_job failed; the lease will expire and the job run again",
            { ...ref(job), error: describe(e), failure: outcome.message });
          return undefined;
        }
    }
  }

  private async release(tokens: string[], why: string, db: Pool | PoolClient = this.pool): Promise<void> {
    if (tokens.length === 0) return;
    try {
      await db.query(this.sql.releaseJobs, [tokens]);
    } catch (e) {
      this.o.logger.error("release_jobs failed; the leases will expire instead", { why, jobs: tokens.length, error: describe(e) });
    }
  }

  // -- renewal: one timer for every held lease --

  private scheduleRenewal(): void {
    this.renewTimer = setTimeout(() => {
      this.renewing = this.renewOnce().finally(() => {
        if (this.renewTimer !== undefined) this.scheduleRenewal();
      });
    }, this.o.renewIntervalMs);
  }

  private async renewOnce(): Promise<void> {
    const tokens = [...this.held.keys()];
    if (tokens.length === 0) return;
    let lost: string[];
    try {
      lost = (await this.pool.query<{ lost: string }>(this.sql.renewLeases, [tokens, this.o.leaseMs ?? null])).rows
        .map((r) => r.lost);
    } catch (e) {
      this.o.logger.warn("renew_leases failed; retrying at the next renewal", { jobs: tokens.length, error: describe(e) });
      return;
    }
    for (const token of lost) {
      const entry = this.held.get(token);
      if (entry === undefined || entry.state === "completing" || entry.aborted) continue;
      if (entry.state === "waiting") { // never started: nothing to stop, nothing to run
        const waiting = this.waiting.get(entry.job.queue) ?? [];
        waiting.splice(waiting.indexOf(entry), 1);
        this.held.delete(token);
        this.o.logger.warn("lease lost before the job started: another attempt owns it", ref(entry.job));
        this.waker.wake();
        continue;
      }
      this.o.logger.warn("lease lost: aborting the handler", ref(entry.job));
      entry.attempt?.leaseLost("renewal");
      entry.abort(new LeaseLostError(`the lease of job ${entry.job.id} is lost`));
    }
  }

  // -- wake-ups: LISTEN on a client of its own, the poll as the fallback --

  private async listen(): Promise<void> {
    this.listenerTimer = undefined;
    let client: PoolClient | undefined;
    try {
      client = await this.pool.connect();
      const c = client;
      c.on("notification", (n: Notification) => {
        if (n.channel !== this.sql.channel) return;
        const queues = (n.payload ?? "*").split(",");
        if (queues.includes("*") || queues.some((q) => this.o.queues.has(q))) this.waker.wake();
      });
      c.on("error", (e: Error) => {
        if (this.listener !== c) return;
        this.o.logger.warn("the LISTEN connection failed; polling until it is back", { error: describe(e) });
        this.listener = undefined;
        c.release(e);
        this.retryListen();
      });
      await c.query(this.sql.listen);
      if (this.state !== "running") {
        c.release(true);
        return;
      }
      this.listener = c;
      this.waker.wake(); // what was notified while we were not listening
    } catch (e) {
      if (client !== undefined && this.listener !== client) client.release(e instanceof Error ? e : true);
      this.o.logger.warn("LISTEN failed; polling until it works", { error: describe(e) });
      this.retryListen();
    }
  }

  private retryListen(): void {
    if (this.state === "running" && this.listenerTimer === undefined) {
      this.listenerTimer = setTimeout(() => void this.listen(), Math.max(this.o.pollIntervalMs, 1000));
    }
  }

  // -- shutdown --

  private async shutdown(graceMs: number): Promise<void> {
    if (this.state === "idle") {
      this.state = "stopped";
      if (this.ownsPool) await this.pool.end();
      return;
    }
    this.state = "stopping";
    const running = () => [...this.held.values()].filter((h) => h.state !== "waiting");
    this.o.logger.info("stopping: no more leases", { running: running().length, grace_ms: graceMs });
    this.waker.wake();
    await this.loop;
    clearTimeout(this.listenerTimer);
    this.listener?.release(true); // destroyed, not pooled: it is LISTENing
    this.leases.close(); // the loop has returned: no lease is on its way
    this.listener = undefined;
    // Jobs leased ahead never started: back to the queue at once, their attempts not charged.
    const notStarted = [...this.waiting.values()].flatMap((w) => w.splice(0));
    for (const entry of notStarted) this.held.delete(entry.job.leaseToken);
    await this.release(notStarted.map((h) => h.job.leaseToken), "stopping");
    const all = () => Promise.allSettled(running().map((r) => r.done));
    if (this.held.size > 0) await within(all(), graceMs);
    if (this.held.size > 0) {
      this.o.logger.warn("shutdown grace over: aborting the handlers still running", { running: this.held.size });
      for (const entry of this.held.values()) {
        if (entry.state === "running") entry.abort(new ShutdownError("the worker is stopping"));
      }
      await within(all(), 1000); // each gives its own job back as it stops
    }
    // A completion on its way must not race a release; its connection goes back once it is done.
    await within(this.completer.idle().then(() => this.completions.close()), 1000);
    const timer = this.renewTimer;
    this.renewTimer = undefined;
    clearTimeout(timer);
    await this.renewing;
    const left = [...this.held.keys()];
    if (left.length > 0) {
      this.o.logger.warn("handlers ignored their signal: releasing their jobs", { jobs: left.length });
      await this.release(left, "shutdown");
    }
    if (this.onSignal !== undefined) {
      process.off("SIGTERM", this.onSignal);
      process.off("SIGINT", this.onSignal);
    }
    this.state = "stopped";
    if (this.ownsPool) await within(this.pool.end(), 1000); // a handler that never returns keeps its client
    this.o.logger.info("worker stopped", { name: this.o.name });
  }
}

/** PostgreSQL's undefined_function: a function the schema's version does not have yet. */
const undefinedFunction = "42883";
/** PostgreSQL's query_canceled: a statement_timeout (an attempt of class timeout). */
const queryCanceled = "57014";

/** An array of the decimal strings of bigints (ids, lease tokens: the database's own) as the
 *  literal of a bigint[]: node-postgres would quote and escape each element, a few µs per job
 *  for a thousand-job batch, where digits need neither. */
function bigintArray(values: string[]): string {
  return `{${values.join(",")}}`;
}

/** How a job is named in every log line. */
function ref(job: Job): Record<string, unknown> {
  return { job_id: job.id, kind: job.kind, queue: job.queue, attempt: job.attempt };
}
