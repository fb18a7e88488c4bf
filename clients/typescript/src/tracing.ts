// OpenTelemetry spans, the C++ worker's (docs/opentelemetry.md), through @opentelemetry/api
// when the application has it installed: an optional peer dependency, loaded once with a
// dynamic import(). Without it, loadTracing() settles with null, and the worker and enqueue()
// take their untraced path: no span, no closure, no allocation per job.
//
// - `send {queue}` (PRODUCER) around enqueue(): the job stores its context as its traceparent;
// - `process {queue}` (CONSUMER), one per attempt, a child of the job's traceparent, active
//   while the handler runs, so that the handler's own spans nest under it. It ends with the
//   attempt's settlement, not when the handler returns (as the C++ worker's does): through the
//   API, the outcome that fail_job() answers can only be set on a span not yet ended;
// - `settle {queue}` (CLIENT), a child of process, around complete_job()/complete_jobs() and
//   its commit, or fail_job().
//
// The stored traceparent is W3C's format whatever propagator the application registered (it
// is a column, not a header), so it is read and written here by the W3C Trace Context rules
// rather than through the global propagator.

import type * as Api from "@opentelemetry/api";

type OTel = typeof Api;

/** How an attempt ended, as oncely.job.outcome says it. */
export type SpanOutcome = "completed" | "retried" | "dead_lettered" | "deduplicated" | "lease_stale";

/** What a job tells its spans about itself. */
export interface TracedJob {
  readonly id: string;
  readonly kind: string;
  readonly queue: string;
  readonly attempt: number;
  /** The idempotency key the producer gave, or null. */
  readonly producerKey: string | null;
  readonly traceparent: string | null;
}

/** The version-00 W3C traceparent of a span context. */
export function formatTraceparent(sc: Api.SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[!-~]*)?$/;

/** Whether `text` is a traceparent the jobs table accepts (migration 0008's CHECK): version not
 *  ff, version 00 exactly 55 characters, trace and span ids not all zero, at most 512 characters. */
export function isTraceparent(text: string): boolean {
  const m = TRACEPARENT.exec(text);
  return m !== null && m[1] !== "ff" && (m[1] !== "00" || text.length === 55) && text.length <= 512 &&
    !/^0+$/.test(m[2]!) && !/^0+$/.test(m[3]!);
}

/** The remote span context a traceparent carries, or undefined when it is none. */
export function parseTraceparent(text: string): Api.SpanContext | undefined {
  if (!isTraceparent(text)) return undefined;
  return { traceId: text.slice(3, 35), spanId: text.slice(36, 52), traceFlags: parseInt(text.slice(53, 55), 16),
    isRemote: true };
}

/** The spans of one attempt: its process span, and the settle span of its completion or failure. */
export class Attempt {
  private settleSpan: Api.Span | undefined;
  private leaseLostNoted = false;
  private ended = false;

  constructor(
    private readonly t: Tracing,
    private readonly job: TracedJob,
    private readonly span: Api.Span,
    private readonly ctx: Api.Context,
  ) {}

  /** Runs the handler with the process span active. */
  run<T>(fn: () => T): T {
    return this.t.api.context.with(this.ctx, fn);
  }

  /** The lease was found lost: by the renewal while the handler ran, or by the fenced completion. */
  leaseLost(noticedBy: "renewal" | "completion"): void {
    if (this.ended || this.leaseLostNoted) return;
    this.leaseLostNoted = true;
    this.span.addEvent("oncely.lease.lost", { "oncely.lease.noticed_by": noticedBy });
  }

  /** Starts the settle span (once): the completion or the failure call is on its way. */
  settling(): void {
    if (this.settleSpan !== undefined || this.ended) return;
    const { job } = this;
    this.settleSpan = this.t.tracer.startSpan(`settle ${job.queue}`,
      { kind: this.t.api.SpanKind.CLIENT, attributes: attemptAttributes(job, "settle") }, this.ctx);
  }

  /** The fenced completion refused the lease: it is no longer this attempt's. */
  stale(): void {
    this.settleSpan?.addEvent("oncely.completion.stale");
    this.leaseLost("completion");
  }

  /**
   * Ends the attempt's spans, once. `outcome` undefined: the job was given back, or its
   * settlement failed. `errorType` (an error class: "retryable", "permanent", ...) and
   * `message` mark a failed attempt.
   */
  finish(outcome: SpanOutcome | undefined, errorType?: string, message?: string): void {
    if (this.ended) return;
    this.ended = true;
    for (const span of this.settleSpan === undefined ? [this.span] : [this.settleSpan, this.span]) {
      if (outcome !== undefined) span.setAttribute("oncely.job.outcome", outcome);
      if (errorType !== undefined) span.setAttribute("error.type", errorType);
      // The attempt failed, not its settlement: the status is the process span's.
      if (message !== undefined && span === this.span) span.setStatus({ code: this.t.api.SpanStatusCode.ERROR, message });
      span.end();
    }
  }
}

function attemptAttributes(job: TracedJob, operation: "process" | "settle"): Api.Attributes {
  const attributes: Api.Attributes = {
    "messaging.system": "oncely",
    "messaging.destination.name": job.queue,
    "messaging.operation.name": operation,
    "messaging.operation.type": operation,
    "messaging.message.id": job.id,
    "oncely.job.kind": job.kind,
    "oncely.job.attempt": job.attempt,
  };
  if (job.producerKey !== null) attributes["oncely.job.key"] = job.producerKey;
  return attributes;
}

/** What the producer of a job gave enqueue(), for its send span. */
export interface Sending {
  readonly queue: string;
  readonly kind: string;
  readonly key: string | undefined;
  /** The caller's traceparent: the send span's parent (else the active context). */
  readonly traceparent: string | undefined;
}

/** The loaded API and oncely's tracer. */
export class Tracing {
  readonly tracer: Api.Tracer;

  constructor(readonly api: OTel) {
    // A ProxyTracer until the application registers its provider: it follows it then.
    this.tracer = api.trace.getTracer("oncely");
  }

  /** The context a stored traceparent names, under `base`; `base` itself when there is none. */
  private parent(traceparent: string | null | undefined, base: Api.Context): Api.Context {
    const sc = traceparent == null ? undefined : parseTraceparent(traceparent);
    return sc === undefined ? base : this.api.trace.setSpanContext(base, sc);
  }

  /** Starts an attempt's process span: a child of the job's traceparent, or of the active context. */
  attempt(job: TracedJob): Attempt {
    const active = this.api.context.active();
    const span = this.tracer.startSpan(`process ${job.queue}`,
      { kind: this.api.SpanKind.CONSUMER, attributes: attemptAttributes(job, "process") },
      this.parent(job.traceparent, active));
    return new Attempt(this, job, span, this.api.trace.setSpan(active, span));
  }

  /**
   * Runs `insert` (the enqueue) inside a send span and returns the job's id. `insert` gets the
   * traceparent the job is to store: the send span's, or the caller's when the span has no
   * valid context (no SDK registered), or null.
   */
  async send(s: Sending, insert: (traceparent: string | null) => Promise<string>): Promise<string> {
    const attributes: Api.Attributes = {
      "messaging.system": "oncely",
      "messaging.destination.name": s.queue,
      "messaging.operation.name": "send",
      "messaging.operation.type": "send",
      "oncely.job.kind": s.kind,
    };
    if (s.key !== undefined) attributes["oncely.job.key"] = s.key;
    const active = this.api.context.active();
    const span = this.tracer.startSpan(`send ${s.queue}`, { kind: this.api.SpanKind.PRODUCER, attributes },
      this.parent(s.traceparent, active));
    const sc = span.spanContext();
    const traceparent = this.api.isSpanContextValid(sc) ? formatTraceparent(sc) : s.traceparent ?? null;
    try {
      const id = await this.api.context.with(this.api.trace.setSpan(active, span), () => insert(traceparent));
      span.setAttribute("messaging.message.id", id);
      return id;
    } catch (e) {
      span.setAttribute("error.type", errorTypeOf(e));
      span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: oneLine(e) });
      throw e;
    } finally {
      span.end();
    }
  }
}

/** A thrown value's type for error.type: its SQLSTATE, else its name. */
function errorTypeOf(e: unknown): string {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)) return code;
  return e instanceof Error ? e.name : "_OTHER";
}

function oneLine(e: unknown): string {
  return (e instanceof Error ? `${e.name}: ${e.message}` : String(e)).split("\n", 1)[0]!;
}

let loaded: Tracing | null | undefined; // undefined until the import settled
let loading: Promise<Tracing | null> | undefined;

/** Loads @opentelemetry/api, once: null when it is not installed. */
export function loadTracing(): Promise<Tracing | null> {
  return (loading ??= import("@opentelemetry/api").then(
    (api) => (loaded = new Tracing(api)),
    () => (loaded = null),
  ));
}

/** What loadTracing() settled with, or undefined before it has. */
export function tracingLoaded(): Tracing | null | undefined {
  return loaded;
}
