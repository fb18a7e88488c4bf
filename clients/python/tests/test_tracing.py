"""OpenTelemetry spans (oncely._tracing) without a database, and without opentelemetry: the
package is not installed here, so these tests write a STAND-IN for it into a temporary
directory. The stand-in mirrors only the surface of opentelemetry-api that _tracing uses
(trace.get_tracer, Tracer.start_span, use_span, set_span_in_context, SpanKind, Status,
StatusCode, TraceContextTextMapPropagator.extract/inject) and records every call. It is not
OpenTelemetry: these tests check oncely's calls, not the real package's behaviour."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest

from oncely import PermanentError, Worker, _tracing, enqueue
from oncely._handler import Connection
from oncely._job import Job
from oncely._outcome import Action, Outcome
from test_enqueue_arguments import Recorder

STAND_IN_TRACE = '''
"""STAND-IN for opentelemetry-api's opentelemetry.trace, written by oncely's tests
(tests/test_tracing.py): the calls oncely._tracing makes, recorded. Not OpenTelemetry."""
import contextlib
import contextvars
import enum
import random

STAND_IN = True
STARTED = []  # every span started, in order
USE_SPAN_CALLS = []  # the keyword arguments of each use_span()
TRACERS = []  # the names get_tracer() was asked for


class SpanKind(enum.Enum):
    INTERNAL = 0
    SERVER = 1
    CLIENT = 2
    PRODUCER = 3
    CONSUMER = 4


class StatusCode(enum.Enum):
    UNSET = 0
    OK = 1
    ERROR = 2


class Status:
    def __init__(self, status_code=StatusCode.UNSET, description=None):
        self.status_code = status_code
        self.description = description


class SpanContext:
    def __init__(self, trace_id, span_id, is_remote, trace_flags=0):
        self.trace_id, self.span_id, self.is_remote, self.trace_flags = trace_id, span_id, is_remote, trace_flags

    @property
    def is_valid(self):
        return self.trace_id != 0 and self.span_id != 0


INVALID_SPAN_CONTEXT = SpanContext(0, 0, False)


class NonRecordingSpan:
    def __init__(self, context):
        self._context = context

    def get_span_context(self):
        return self._context


INVALID_SPAN = NonRecordingSpan(INVALID_SPAN_CONTEXT)


class Context(dict):
    pass


_SPAN_KEY = "current-span"
_current = contextvars.ContextVar("current", default=Context())


def get_current_span(context=None):
    return (context if context is not None else _current.get()).get(_SPAN_KEY, INVALID_SPAN)


def set_span_in_context(span, context=None):
    new = Context(context if context is not None else _current.get())
    new[_SPAN_KEY] = span
    return new


class Span(NonRecordingSpan):
    def __init__(self, name, parent, kind, attributes):
        parent_context = parent.get_span_context()
        trace_id = parent_context.trace_id if parent_context.is_valid else random.getrandbits(128)
        super().__init__(SpanContext(trace_id, random.getrandbits(64) or 1, False, 1))
        self.name, self.parent, self.kind = name, parent, kind
        self.attributes = dict(attributes or {})
        self.events = []
        self.status = Status()
        self.ended = 0  # how many times end() was called

    def set_attribute(self, key, value):
        self.attributes[key] = value

    def add_event(self, name, attributes=None, timestamp=None):
        self.events.append(name if not attributes else (name, dict(attributes)))

    def set_status(self, status, description=None):
        self.status = status

    def end(self, end_time=None):
        self.ended += 1


class Tracer:
    def start_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None, links=None, start_time=None,
                   record_exception=True, set_status_on_exception=True):
        span = Span(name, get_current_span(context), kind, attributes)
        STARTED.append(span)
        return span


def get_tracer(instrumenting_module_name, instrumenting_library_version=None, tracer_provider=None,
               schema_url=None, attributes=None):
    TRACERS.append(instrumenting_module_name)
    return Tracer()


@contextlib.contextmanager
def use_span(span, end_on_exit=False, record_exception=True, set_status_on_exception=True):
    USE_SPAN_CALLS.append(dict(end_on_exit=end_on_exit, record_exception=record_exception,
                               set_status_on_exception=set_status_on_exception))
    token = _current.set(set_span_in_context(span))
    try:
        yield span
    finally:
        _current.reset(token)
        if end_on_exit:
            span.end()
'''

STAND_IN_TRACECONTEXT = '''
"""STAND-IN for opentelemetry.trace.propagation.tracecontext (oncely's tests). Not OpenTelemetry."""
import re

from opentelemetry import trace

_FORMAT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


class TraceContextTextMapPropagator:
    def extract(self, carrier, context=None, getter=None):
        context = trace.Context() if context is None else context
        m = _FORMAT.fullmatch(carrier.get("traceparent", ""))
        if m is None:
            return context
        remote = trace.SpanContext(int(m[2], 16), int(m[3], 16), True, int(m[4], 16))
        return trace.set_span_in_context(trace.NonRecordingSpan(remote), context)

    def inject(self, carrier, context=None, setter=None):
        sc = trace.get_current_span(context).get_span_context()
        if sc.is_valid:
            carrier["traceparent"] = f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"
'''

PRODUCER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _purge() -> None:
    for name in [n for n in sys.modules if n == "opentelemetry" or n.startswith("opentelemetry.")]:
        del sys.modules[name]


@pytest.fixture
def otel(tmp_path: Path) -> Iterator[Any]:
    """The stand-in on sys.path and _tracing reloaded over it; the stand-in's trace module.
    Afterwards: the stand-in gone, _tracing reloaded without it."""
    package = tmp_path / "opentelemetry"
    (package / "trace" / "propagation").mkdir(parents=True)
    (package / "__init__.py").write_text('"""STAND-IN for opentelemetry (oncely\'s tests)."""\n')
    (package / "trace" / "__init__.py").write_text(textwrap.dedent(STAND_IN_TRACE))
    (package / "trace" / "propagation" / "__init__.py").write_text("")
    (package / "trace" / "propagation" / "tracecontext.py").write_text(textwrap.dedent(STAND_IN_TRACECONTEXT))
    sys.path.insert(0, str(tmp_path))
    _purge()
    try:
        importlib.reload(_tracing)
        trace = importlib.import_module("opentelemetry.trace")
        assert trace.STAND_IN and _tracing.ENABLED
        yield trace
    finally:
        sys.path.remove(str(tmp_path))
        _purge()
        importlib.reload(_tracing)


def traceparent_of(span: Any) -> str:
    sc = span.get_span_context()
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"


def named(trace: Any, name: str) -> list[Any]:
    return [s for s in trace.STARTED if s.name == name]


def test_without_opentelemetry_everything_is_a_no_op() -> None:
    assert importlib.util.find_spec("opentelemetry") is None, "these tests expect opentelemetry not installed"
    assert not _tracing.ENABLED
    assert _tracing.attempt(job("k")) is None
    with _tracing.running(None):
        pass
    cursor = Recorder()
    assert enqueue(cursor, "k", {}) == 7
    assert enqueue(cursor, "k", {}, traceparent=PRODUCER) == 7  # stored as given
    assert cursor.calls[0][0].startswith('SELECT "oncely".enqueue(')
    assert cursor.calls[1] == ('SELECT "oncely".enqueue(kind => %s, payload => %s::jsonb, queue => %s, '
                               'traceparent => %s)', ["k", "{}", "default", PRODUCER])


@pytest.mark.parametrize("bad", ["", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                 "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                                 "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                                 "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", PRODUCER + "-x"])
def test_a_traceparent_the_jobs_table_would_refuse_is_refused_first(bad: str) -> None:
    with pytest.raises(ValueError, match="traceparent"):
        enqueue(Recorder(), "k", {}, traceparent=bad)


def test_send_span_is_a_child_of_the_callers_traceparent_and_the_job_stores_its_context(otel: Any) -> None:
    cursor = Recorder()
    assert enqueue(cursor, "send_email", {"to": "a@b"}, queue="mail", key="order-7", traceparent=PRODUCER) == 7
    [send] = named(otel, "send mail")
    assert send.kind is otel.SpanKind.PRODUCER
    assert send.parent.get_span_context().is_remote
    assert traceparent_of(send.parent) == PRODUCER
    assert send.get_span_context().trace_id == 0x4bf92f3577b34da6a3ce929d0e0e4736
    assert send.attributes == {
        "messaging.system": "oncely", "messaging.destination.name": "mail", "messaging.operation.name": "send",
        "messaging.operation.type": "send", "oncely.job.kind": "send_email", "oncely.job.key": "order-7",
        "messaging.message.id": "7"}
    assert send.ended == 1 and send.status.status_code is otel.StatusCode.UNSET
    query, params = cursor.calls[0]
    assert query.startswith('SELECT "oncely".enqueue(') and query.endswith(", traceparent => %s)")
    assert params[-1] == traceparent_of(send)
    assert otel.USE_SPAN_CALLS == [dict(end_on_exit=False, record_exception=False, set_status_on_exception=False)]
    assert set(otel.TRACERS) == {"oncely"}


def test_send_span_is_a_child_of_the_current_span(otel: Any) -> None:
    cursor = Recorder()
    request = otel.get_tracer("app").start_span("request")
    with otel.use_span(request):
        enqueue(cursor, "k", {}, depends_on=[3], batch_id=4)
        enqueue(cursor, "k", {}, unique_key="u")
    sends = named(otel, "send default")
    assert [s.parent for s in sends] == [request, request]
    assert "oncely.job.key" not in sends[0].attributes
    query, params = cursor.calls[0]
    assert query.endswith("depends_on => %s::bigint[], batch_id => %s::bigint, traceparent => %s)")
    assert params[-3:] == [[3], 4, traceparent_of(sends[0])]
    # A unique job: the traceparent goes too, and enqueue() stores none for it (schema version 26).
    assert cursor.calls[1][0].startswith('SELECT "oncely".enqueue(')


def test_a_failed_enqueue_ends_its_send_span_with_error(otel: Any) -> None:
    class Refused(Exception):
        sqlstate = "42501"

    with pytest.raises(Refused):
        enqueue(Recorder(Refused("permission denied for table jobs")), "k", {})
    [send] = named(otel, "send default")
    assert send.status.status_code is otel.StatusCode.ERROR
    assert send.status.description == "Refused: permission denied for table jobs"
    assert send.attributes["error.type"] == "42501"
    assert "messaging.message.id" not in send.attributes and send.ended == 1


def job(kind: str, *, id: int = 11, key: str | None = None, traceparent: str | None = None, attempt: int = 1) -> Job:
    return Job(id=id, kind=kind, queue="q", payload={}, key=key, attempt=attempt, lease_token=100 + id,
               lease_expires_at=None, traceparent=traceparent)


def test_an_attempts_spans(otel: Any) -> None:
    spans = _tracing.attempt(job("charge", key="order-7", traceparent=PRODUCER, attempt=2))
    assert spans is not None
    [process] = named(otel, "process q")
    assert process.kind is otel.SpanKind.CONSUMER
    assert traceparent_of(process.parent) == PRODUCER and process.parent.get_span_context().is_remote
    assert process.attributes == {
        "messaging.system": "oncely", "messaging.destination.name": "q", "messaging.operation.name": "process",
        "messaging.operation.type": "process", "messaging.message.id": "11", "oncely.job.kind": "charge",
        "oncely.job.attempt": 2, "oncely.job.key": "order-7"}
    with _tracing.running(spans):  # the handler's own spans nest under process
        mine = otel.get_tracer("app").start_span("user work")
    assert mine.parent is process
    spans.lease_lost("renewal")
    spans.settling()
    spans.settling()  # once
    [settle] = named(otel, "settle q")
    assert settle.kind is otel.SpanKind.CLIENT and settle.parent is process
    assert settle.attributes["messaging.operation.name"] == settle.attributes["messaging.operation.type"] == "settle"
    spans.stale()
    spans.finish("retried", "retryable", "RuntimeError: upstream said no")
    spans.finish("completed")  # once
    spans.lease_lost("renewal")  # after the end: nothing
    assert process.events == [("oncely.lease.lost", {"oncely.lease.noticed_by": "renewal"})]  # once
    assert settle.events == ["oncely.completion.stale"]
    for span in (process, settle):
        assert span.ended == 1
        assert span.attributes["oncely.job.outcome"] == "retried"
        assert span.attributes["error.type"] == "retryable"
    # The attempt failed, its settlement did not: the status is the process span's.
    assert process.status.status_code is otel.StatusCode.ERROR
    assert process.status.description == "RuntimeError: upstream said no"
    assert settle.status.status_code is otel.StatusCode.UNSET


def test_a_job_without_traceparent_has_its_process_span_under_the_current_context(otel: Any) -> None:
    spans = _tracing.attempt(job("k"))
    assert spans is not None
    spans.finish("completed")
    [process] = named(otel, "process q")
    assert not process.parent.get_span_context().is_valid  # a root: nothing was current
    assert "oncely.job.key" not in process.attributes
    assert process.status.status_code is otel.StatusCode.UNSET and process.attributes["oncely.job.outcome"] == "completed"


class Conn:
    """A connection for the worker's settlement: fail_job() answers `next`, or raises `error`."""

    def __init__(self, next: str = "retry", error: Exception | None = None) -> None:
        self.next, self.error = next, error
        self.calls: list[str] = []

    def execute(self, query: str, params: Any = None) -> Conn:
        self.calls.append(query)
        if self.error is not None:
            raise self.error
        return self

    def fetchone(self) -> tuple[str]:
        return (self.next,)


class Stale(psycopg.Error):
    sqlstate = "OC101"


def held_worker() -> Worker:
    w = Worker("postgresql://nobody@127.0.0.1:1/none", {"q": 2})  # connects only in run()

    @w.handler("refused")
    def refused(job: Job) -> None:
        raise PermanentError("no such customer")

    @w.handler("fine")
    def fine(job: Job) -> None:
        pass

    @w.handler("waits")
    def waits(job: Job) -> None:
        job.lease_lost.wait(5)
        raise RuntimeError("stopped: lease lost")
    return w


def run_alone(w: Worker, j: Job) -> tuple[Outcome, BaseException | None]:
    """A job-only attempt as the worker's slot runs it, its job held."""
    from oncely._worker import _Held
    w._held[j.lease_token] = _Held(j)
    return w._attempt_alone(j, w._handlers.get(j.kind))


@pytest.mark.parametrize(("kind", "next", "outcome", "error_type"), [
    ("refused", "dead", "dead_lettered", "permanent"),
    ("nobody_handles_it", "dead", "dead_lettered", "unknown_kind"),
])
def test_the_worker_settles_a_failed_attempt_into_its_spans(otel: Any, kind: str, next: str, outcome: str,
                                                            error_type: str) -> None:
    w = held_worker()
    j = job(kind)
    result, error = run_alone(w, j)
    assert result.action is Action.DEAD
    w._settle(cast(Connection, Conn(next)), j, result, error)  # (fail_job(), as the completer calls it)
    [process], [settle] = named(otel, "process q"), named(otel, "settle q")
    assert settle.parent is process
    for span in (process, settle):
        assert span.attributes["oncely.job.outcome"] == outcome
        assert span.attributes["error.type"] == error_type
        assert span.ended == 1
    assert process.status.status_code is otel.StatusCode.ERROR
    assert settle.status.status_code is otel.StatusCode.UNSET


def test_a_failure_that_fail_job_finds_stale(otel: Any) -> None:
    w = held_worker()
    j = job("refused")
    w._settle(cast(Connection, Conn(error=Stale("the lease is not ours"))), j, *run_alone(w, j))
    [process], [settle] = named(otel, "process q"), named(otel, "settle q")
    assert settle.events == ["oncely.completion.stale"]
    assert process.events == [("oncely.lease.lost", {"oncely.lease.noticed_by": "completion"})]
    assert process.attributes["oncely.job.outcome"] == settle.attributes["oncely.job.outcome"] == "lease_stale"


class Duplicate(psycopg.Error):
    sqlstate = "OC102"


def test_a_duplicate_given_back(otel: Any) -> None:
    w = held_worker()
    j = job("fine", key="paid-once")
    run_alone(w, j)  # its spans start
    error = Duplicate("already processed")
    w._settle(cast(Connection, Conn()), j, Outcome(Action.RELEASE, "Duplicate: already processed"), error)
    [process], [settle] = named(otel, "process q"), named(otel, "settle q")
    for span in (process, settle):
        assert span.attributes["oncely.job.outcome"] == "deduplicated"
        assert span.status.status_code is otel.StatusCode.UNSET and span.ended == 1


def test_a_job_only_completion_as_complete_jobs_reports_it(otel: Any) -> None:
    w = held_worker()
    done, lost = job("fine", id=1), job("fine", id=2)
    for j in (done, lost):
        assert w._hand_over(j, *run_alone(w, j))  # settle spans start: the completer has them
    w._reported(done, True)
    w._reported(lost, False)
    for j in (done, lost):
        w._let_go(j)
    assert [s.events for s in named(otel, "process q")] == [
        [], [("oncely.lease.lost", {"oncely.lease.noticed_by": "completion"})]]
    process = {s.attributes["messaging.message.id"]: s for s in named(otel, "process q")}
    settle = {s.attributes["messaging.message.id"]: s for s in named(otel, "settle q")}
    assert process["1"].attributes["oncely.job.outcome"] == settle["1"].attributes["oncely.job.outcome"] == "completed"
    assert process["2"].attributes["oncely.job.outcome"] == "lease_stale" and settle["2"].events == [
        "oncely.completion.stale"]
    assert all(s.ended == 1 for s in [*process.values(), *settle.values()])


def test_a_lease_lost_while_the_handler_runs(otel: Any) -> None:
    w = held_worker()
    j = job("waits")
    ran: list[tuple[Outcome, BaseException | None]] = []
    handler = threading.Thread(target=lambda: ran.append(run_alone(w, j)))
    handler.start()
    while not named(otel, "process q"):
        threading.Event().wait(0.01)
    # What the renewal thread does when renew_leases() names the token.
    held = w._held[j.lease_token]
    j.lease_lost.set()
    assert held.spans is not None
    held.spans.lease_lost("renewal")
    handler.join(5)
    [(result, _)] = ran
    assert result.action is Action.LOST
    assert not w._hand_over(j, result, None)
    w._let_go(j)
    [process] = named(otel, "process q")
    assert process.events == [("oncely.lease.lost", {"oncely.lease.noticed_by": "renewal"})]
    assert not named(otel, "settle q")
    assert process.attributes["oncely.job.outcome"] == "lease_stale" and process.ended == 1
