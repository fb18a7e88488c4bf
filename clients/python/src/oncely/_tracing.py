"""OpenTelemetry spans, the C++ worker's (docs/opentelemetry.md), through the opentelemetry
API when the application has it installed (`pip install opentelemetry-api`, and an SDK to
export them). Without it, ENABLED is False and every function here does nothing: the worker
and enqueue() take their untraced path.

- `send {queue}` (PRODUCER) around enqueue(): the job stores its context as its traceparent;
- `process {queue}` (CONSUMER), one per attempt, a child of the job's traceparent, current
  while the handler runs, so that the handler's own spans nest under it. It ends with the
  attempt's settlement, not when the handler returns (as the C++ worker's does): through the
  API, the outcome that fail_job() answers can only be set on a span not yet ended;
- `settle {queue}` (CLIENT), a child of process, around complete_job()/complete_jobs() and
  its commit, or fail_job().

The stored traceparent is W3C's format whatever propagator the application configured (it is
a column, not a header), so it is read and written with the W3C TraceContext propagator
itself, not the global one.

The API is imported through importlib: its modules are then typed as ModuleType, which checks
with mypy --strict whether the package is installed or not.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, ContextManager

from ._job import Job


def _load() -> tuple[ModuleType, Any] | None:
    """opentelemetry.trace and a W3C TraceContext propagator, or None when not installed."""
    try:
        trace = importlib.import_module("opentelemetry.trace")
        tracecontext = importlib.import_module("opentelemetry.trace.propagation.tracecontext")
    except ImportError:
        return None
    return trace, tracecontext.TraceContextTextMapPropagator()


_loaded = _load()
ENABLED = _loaded is not None
_NOTHING: ContextManager[None] = contextlib.nullcontext()  # one, reused: no allocation per job


def _api() -> tuple[ModuleType, Any]:
    assert _loaded is not None, "only called when ENABLED"
    return _loaded


def _tracer() -> Any:
    # The API's proxy until the application sets its provider, which it follows from then on.
    return _api()[0].get_tracer("oncely")


def _parent(traceparent: str | None) -> Any:
    """The context a stored traceparent names (extracted by the W3C propagator); None (the
    current context) when there is none."""
    if traceparent is None:
        return None
    return _api()[1].extract({"traceparent": traceparent})


def _traceparent(span: Any) -> str | None:
    """The span's context as a W3C traceparent (None when it has no valid context)."""
    trace, propagator = _api()
    carrier: dict[str, str] = {}
    propagator.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def _fail(span: Any, error_type: str | None, message: str) -> None:
    trace = _api()[0]
    if error_type is not None:
        span.set_attribute("error.type", error_type)
    span.set_status(trace.Status(trace.StatusCode.ERROR, message))


def send(queue: str, kind: str, key: str | None, traceparent: str | None,
         insert: Callable[[str | None], int]) -> int:
    """Runs `insert` (the enqueue) in a send span and returns the job's id. `insert` gets the
    traceparent the job is to store: the send span's, or `traceparent` when the span has no
    valid context (no SDK set up) or tracing is off. `traceparent`, when given, is the send
    span's parent; else the current context is."""
    if not ENABLED:
        return insert(traceparent)
    trace = _api()[0]
    attributes: dict[str, Any] = {"messaging.system": "oncely", "messaging.destination.name": queue,
                                  "messaging.operation.name": "send", "messaging.operation.type": "send",
                                  "oncely.job.kind": kind}
    if key is not None:
        attributes["oncely.job.key"] = key
    span = _tracer().start_span(f"send {queue}", context=_parent(traceparent), kind=trace.SpanKind.PRODUCER,
                                attributes=attributes)
    try:
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            job = insert(_traceparent(span) or traceparent)
        span.set_attribute("messaging.message.id", str(job))
        return job
    except BaseException as e:
        _fail(span, getattr(e, "sqlstate", None) or type(e).__qualname__, one_line(e))
        raise
    finally:
        span.end()


def one_line(error: BaseException) -> str:
    text = str(error).strip().split("\n", 1)[0]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Attempt:
    """The spans of one attempt: its process span, started here, and the settle span of its
    completion or failure. Safe from any thread (the renewal's tells of a lost lease)."""

    def __init__(self, job: Job) -> None:
        trace = _api()[0]
        self._attributes: dict[str, Any] = {
            "messaging.system": "oncely", "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id), "oncely.job.kind": job.kind, "oncely.job.attempt": job.attempt}
        if job.key is not None:
            self._attributes["oncely.job.key"] = job.key
        self._queue = job.queue
        self._lock = threading.Lock()
        self._ended = False
        self._lease_lost_noted = False
        self._settle: Any = None
        self._span: Any = _tracer().start_span(f"process {job.queue}", context=_parent(job.traceparent),
                                               kind=trace.SpanKind.CONSUMER,
                                               attributes=self._operation("process"))

    def _operation(self, name: str) -> dict[str, Any]:
        return {**self._attributes, "messaging.operation.name": name, "messaging.operation.type": name}

    def running(self) -> ContextManager[Any]:
        """The handler's block: the process span is current in it. What the handler raises
        becomes the outcome (finish()), not an exception event."""
        block: ContextManager[Any] = _api()[0].use_span(self._span, end_on_exit=False, record_exception=False,
                                                        set_status_on_exception=False)
        return block

    def lease_lost(self, noticed_by: str = "renewal") -> None:
        """The lease was found lost: by the renewal while the handler ran ("renewal"), or by
        the fenced completion ("completion")."""
        with self._lock:
            self._note_lease_lost(noticed_by)

    def _note_lease_lost(self, noticed_by: str) -> None:
        if not self._ended and not self._lease_lost_noted:
            self._lease_lost_noted = True
            self._span.add_event("oncely.lease.lost", attributes={"oncely.lease.noticed_by": noticed_by})

    def settling(self) -> None:
        """Starts the settle span (once): the completion or the failure call is on its way."""
        trace = _api()[0]
        with self._lock:
            if self._settle is None and not self._ended:
                self._settle = _tracer().start_span(f"settle {self._queue}",
                                                    context=trace.set_span_in_context(self._span),
                                                    kind=trace.SpanKind.CLIENT,
                                                    attributes=self._operation("settle"))

    def stale(self) -> None:
        """The fenced completion refused the lease: it is no longer this attempt's."""
        with self._lock:
            if self._settle is not None and not self._ended:
                self._settle.add_event("oncely.completion.stale")
            self._note_lease_lost("completion")

    def finish(self, outcome: str | None, error_type: str | None = None, message: str | None = None) -> None:
        """Ends the spans, once. `outcome`: "completed", "retried", "dead_lettered",
        "deduplicated" or "lease_stale" (None: given back at shutdown, or its settlement
        failed); `error_type` (an error
        class) and `message` mark a failed attempt."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        for span in (self._span,) if self._settle is None else (self._settle, self._span):
            if outcome is not None:
                span.set_attribute("oncely.job.outcome", outcome)
            if message is not None and span is self._span:
                _fail(span, error_type, message)  # the attempt failed, not its settlement
            elif error_type is not None:
                span.set_attribute("error.type", error_type)
            span.end()


def attempt(job: Job) -> Attempt | None:
    """The spans of the job's attempt, its process span started; None when tracing is off."""
    return Attempt(job) if ENABLED else None


def running(spans: Attempt | None) -> ContextManager[Any]:
    """The handler's block: the attempt's process span current in it (nothing without one)."""
    return _NOTHING if spans is None else spans.running()
