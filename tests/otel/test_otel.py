"""Span export end to end (docs/opentelemetry.md): real `oncely` processes, a real Postgres,
and a real OTLP/HTTP receiver (otlp_receiver.py) that decodes what it gets by the schema.

Run by ctest (`otel`, tests/CMakeLists.txt) with ONCELY_TEST_DATABASE_URL and ONCELY_BIN.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "conformance"))
from harness import Database, WorkerProcess, env_path, database_for_a_test, wait_until  # noqa: E402

from otlp_receiver import Receiver, Span  # noqa: E402

SECRET = "s3cr3t-api-key-7f1e"

HANDLERS = {
    # Fails its first attempt (exit 1: retried), succeeds on the second.
    "flaky": {"type": "exec", "command": ["/bin/sh", "-c", '[ "$ONCELY_ATTEMPT" -ge 2 ] || { echo "not yet" >&2; exit 1; }']},
    # Exit 65 (EX_DATAERR): a permanent failure, dead-lettered at once.
    "declined": {"type": "exec", "command": ["/bin/sh", "-c", "echo 'card declined' >&2; exit 65"]},
    # Writes its environment where the test can read it: no OTEL_* variable may reach it.
    "env": {"type": "exec", "command": ["/bin/sh", "-c", 'env > "$ENV_OUT"'], "env": {"ENV_OUT": "${ENV_OUT}"}},
    "noop": {"type": "sql", "statement": "SELECT 1"},
}


@pytest.fixture
def db() -> Iterator[Database]:
    yield from database_for_a_test()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def otel_env(db: Database, receiver: Receiver, **extra: str) -> dict[str, str]:
    settings = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "otel-test",
                "OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key={SECRET}", "OTEL_BSP_SCHEDULE_DELAY": "100",
                "ENV_OUT": "/dev/null"}
    return db.env(**{**settings, **extra})


class Worker:
    def __init__(self, db: Database, tmp: Path, env: dict[str, str], mode: str, metrics: bool = False) -> None:
        config = {"shutdown_grace": "5s",
                  "queues": {"payments": {"mode": mode, "max_attempts": 3, "poll_interval": "50ms",
                                          "backoff": {"schedule": ["20ms"]}}},
                  "handlers": HANDLERS}
        config_file = tmp / f"worker-{mode}.json"
        config_file.write_text(json.dumps(config))
        argv = [env_path("ONCELY_BIN"), "worker", "--config", str(config_file)]
        if metrics:
            argv += ["--metrics-addr", "127.0.0.1:0"]
        self.process = WorkerProcess(argv, env, tmp / f"worker-{mode}.log")
        self.db = db
        wait_until(lambda: db.count("workers") > 0 or not self.process.alive(), 20, "the worker to register")
        assert self.process.alive(), self.process.output()

    def metrics_port(self) -> int:
        found: list[int] = []

        def listening() -> bool:
            m = re.search(r"metrics listening .*port=(\d+)", self.process.output())
            if m:
                found.append(int(m.group(1)))
            return bool(m)

        wait_until(listening, 10, "the metrics endpoint")
        return found[0]

    def otel_counts(self) -> dict[str, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port()}/metrics", timeout=5).read().decode()
        counts: dict[str, float] = {}
        for m in re.finditer(r'^oncely_otel_spans_total\{result="(\w+)"\} (\S+)$', text, re.M):
            counts[m.group(1)] = float(m.group(2))
        failed = re.search(r"^oncely_otel_failed_exports_total (\S+)$", text, re.M)
        counts["failed_exports"] = float(failed.group(1)) if failed else 0.0
        return counts

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.proc.pid}/status").read_text()
        m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        assert m
        return int(m.group(1))

    def stop(self) -> None:
        assert self.process.terminate() == 0, self.process.output()

    def cleanup(self) -> None:
        self.process.cleanup()


def enqueue(env: dict[str, str], kind: str, key: str) -> int:
    done = subprocess.run([env_path("ONCELY_BIN"), "enqueue", kind, "{}", "--queue", "payments", "--key", key],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    return int(done.stdout.strip())


def settled(db: Database, job_id: int) -> bool:
    return bool(db.scalar("SELECT count(*) FROM {s}.jobs WHERE id = %s", (job_id,)) == 0)


@pytest.mark.parametrize("mode", ["transaction", "lease"])
def test_a_job_that_fails_once_is_one_trace_from_its_send(db: Database, receiver: Receiver, tmp_path: Path,
                                                          mode: str) -> None:
    env = otel_env(db, receiver)
    worker = Worker(db, tmp_path, env, mode)
    try:
        job_id = enqueue(env, "flaky", "payment-1001")
        wait_until(lambda: settled(db, job_id), 30, "the job to complete")
        # process + settle for each of two attempts, and the producer's send
        wait_until(lambda: len(receiver.taken()) >= 5, 15, "five spans at the receiver")
        worker.stop()
    finally:
        worker.cleanup()

    spans = receiver.taken()
    sends = [s for s in spans if s.name == "send payments"]
    assert len(sends) == 1
    send = sends[0]
    assert send.kind == "producer" and send.parent_span_id is None
    assert send.attr("messaging.system") == "oncely"
    assert send.attr("messaging.message.id") == str(job_id)
    assert send.attr("oncely.job.key") == "payment-1001"
    trace = [s for s in spans if s.trace_id == send.trace_id]
    assert len(trace) == len(spans) == 5, [s.name for s in spans]

    processes = sorted((s for s in trace if s.name == "process payments"), key=lambda s: str(s.attr("oncely.job.attempt")))
    assert [p.attr("oncely.job.attempt") for p in processes] == [1, 2]
    assert [p.attr("oncely.job.outcome") for p in processes] == ["retried", "completed"]
    for p in processes:
        assert p.kind == "consumer"
        assert p.parent_span_id == send.span_id  # the job's stored traceparent is the send span
        assert p.attr("messaging.destination.name") == "payments"
        assert p.attr("messaging.operation.type") == "process"
        assert p.attr("messaging.message.id") == str(job_id)
        assert p.attr("oncely.job.kind") == "flaky"
        assert p.attr("oncely.job.key") == "payment-1001"
        assert p.resource["service.name"] == "otel-test"
    first, second = processes
    assert first.status == "error" and first.attr("error.type") == "retryable"
    assert second.status == "unset" and second.attr("error.type") is None
    assert first.end_ns <= second.start_ns

    settles = {s.parent_span_id: s for s in trace if s.name == "settle payments"}
    assert set(settles) == {first.span_id, second.span_id}
    for p in processes:
        s = settles[p.span_id]
        assert s.kind == "client"
        assert s.attr("messaging.operation.type") == "settle"
        assert s.attr("oncely.job.outcome") == p.attr("oncely.job.outcome")
        assert s.start_ns >= p.end_ns - 1000

    # The API key went to the receiver as a header, and nowhere else.
    assert all(h.get("x-api-key") == SECRET for h in receiver.headers)
    assert SECRET not in worker.process.output()


def test_a_dead_letter_carries_its_error_class(db: Database, receiver: Receiver, tmp_path: Path) -> None:
    env = otel_env(db, receiver)
    worker = Worker(db, tmp_path, env, "lease")
    try:
        job_id = enqueue(env, "declined", "payment-2002")
        wait_until(lambda: db.count("dead_letters") == 1, 30, "the dead letter")
        wait_until(lambda: len(receiver.taken(lambda s: s.name == "settle payments")) == 1, 15, "the settle span")
        worker.stop()
    finally:
        worker.cleanup()
    process = receiver.taken(lambda s: s.name == "process payments")
    assert len(process) == 1
    p = process[0]
    assert p.attr("messaging.message.id") == str(job_id)
    assert p.attr("oncely.job.outcome") == "dead_lettered"
    assert p.attr("error.type") == "permanent"
    assert p.status == "error" and "card declined" in p.status_message
    (settle,) = receiver.taken(lambda s: s.name == "settle payments")
    assert settle.parent_span_id == p.span_id and settle.attr("error.type") == "permanent"


def test_sigterm_flushes_what_is_queued(db: Database, receiver: Receiver, tmp_path: Path) -> None:
    # A schedule of ten minutes: nothing is sent before the shutdown sends it.
    env = otel_env(db, receiver, OTEL_BSP_SCHEDULE_DELAY="600000")
    worker = Worker(db, tmp_path, env, "transaction")
    try:
        ids = [db.enqueue("noop", {}, f"flush-{i}", queue="payments") for i in range(20)]
        wait_until(lambda: all(settled(db, i) for i in ids), 30, "the jobs to complete")
        assert receiver.taken() == []
        worker.stop()
    finally:
        worker.cleanup()
    processes = receiver.taken(lambda s: s.name == "process payments")
    assert sorted(str(i) for i in ids) == sorted(str(s.attr("messaging.message.id")) for s in processes)
    # Jobs enqueued by a plain INSERT carry no traceparent: each attempt is a trace's root.
    assert all(s.parent_span_id is None for s in processes)
    assert len(receiver.taken(lambda s: s.name == "settle payments")) == 20


def test_children_never_see_the_exporters_settings(db: Database, receiver: Receiver, tmp_path: Path) -> None:
    out = tmp_path / "child-env.txt"
    env = otel_env(db, receiver, ENV_OUT=str(out))
    worker = Worker(db, tmp_path, env, "lease")
    try:
        job_id = db.enqueue("env", {}, "env-1", queue="payments")
        wait_until(lambda: settled(db, job_id), 30, "the job to complete")
        worker.stop()
    finally:
        worker.cleanup()
    child = out.read_text()
    assert "OTEL_" not in child and SECRET not in child
    # It ran in its process span: the TRACEPARENT it got is that span's.
    (p,) = receiver.taken(lambda s: s.name == "process payments")
    m = re.search(r"^TRACEPARENT=00-([0-9a-f]{32})-([0-9a-f]{16})-01$", child, re.M)
    assert m and (m.group(1), m.group(2)) == (p.trace_id, p.span_id)


def test_a_collector_down_then_refusing_costs_no_job_and_no_memory(db: Database, receiver: Receiver,
                                                                    tmp_path: Path) -> None:
    """A minute without a collector: thirty seconds down, thirty answering 503. Every job
    completes, the spans that cannot go are dropped and counted, memory stays flat, and the
    export resumes when the collector is back."""
    env = otel_env(db, receiver, OTEL_BSP_MAX_QUEUE_SIZE="256", OTEL_BSP_MAX_EXPORT_BATCH_SIZE="64",
                   OTEL_EXPORTER_OTLP_TIMEOUT="2000")
    receiver.stop()  # down: connections refused
    worker = Worker(db, tmp_path, env, "transaction", metrics=True)
    enqueued: list[int] = []
    try:
        rss: list[int] = []
        start = time.monotonic()
        phase_switched = False
        n = 0
        while time.monotonic() - start < 60:
            if not phase_switched and time.monotonic() - start >= 30:
                receiver.start()  # up again on the same port, but refusing everything
                receiver.answer = 503
                phase_switched = True
            db.conn.execute(  # 100 jobs at a time, a few times a second
                f'INSERT INTO "{db.schema}".jobs (queue, kind, idempotency_key) '
                "SELECT 'payments', 'noop', 'k-' || g FROM generate_series(%s::int, %s::int) g", (n, n + 99))
            n += 100
            time.sleep(0.25)
            if time.monotonic() - start > 10:
                rss.append(worker.rss_kib())
        wait_until(lambda: db.count("jobs") == 0, 60, "every job to complete")
        assert db.count("processed_jobs") == n
        assert db.count("dead_letters") == 0
        counts = worker.otel_counts()
        assert counts["exported"] == 0
        assert counts["queue_full"] + counts["export_failed"] >= n  # two spans a job: most of them dropped
        assert counts["failed_exports"] > 0
        assert receiver.requests > 0 and receiver.taken() == []
        # Memory: flat once the queue is full (10 s in), whatever the minute brings.
        assert max(rss) - min(rss) < 16 * 1024, f"RSS grew from {min(rss)} to {max(rss)} KiB"

        receiver.answer = 200  # back
        job_id = db.enqueue("noop", {}, "after-the-outage", queue="payments")
        wait_until(lambda: any(s.attr("messaging.message.id") == str(job_id) for s in receiver.taken()), 30,
                   "the spans of a job after the outage")
        worker.stop()
    finally:
        worker.cleanup()
    assert SECRET not in worker.process.output()
    assert "otel export failed" in worker.process.output()


def test_messaging_metrics_over_otlp_when_asked(db: Database, receiver: Receiver, tmp_path: Path) -> None:
    """OTEL_METRICS_EXPORTER=otlp: the messaging conventions' counters and durations, by queue
    and error type, cumulative; the producer's from `oncely enqueue`, the worker's at each
    interval and at its SIGTERM."""
    env = otel_env(db, receiver, OTEL_METRICS_EXPORTER="otlp", OTEL_METRIC_EXPORT_INTERVAL="200")
    worker = Worker(db, tmp_path, env, "lease")
    try:
        flaky = enqueue(env, "flaky", "metric-1")
        declined = enqueue(env, "declined", "metric-2")
        wait_until(lambda: settled(db, flaky) and settled(db, declined), 30, "the jobs to settle")
        worker.stop()  # its last export, with everything
    finally:
        worker.cleanup()
    by_name = {m.name: m for m in receiver.latest_metrics()}
    consumed = by_name["messaging.client.consumed.messages"]
    assert consumed.kind == "sum" and consumed.monotonic and consumed.temporality == "cumulative"
    assert consumed.unit == "{message}" and consumed.resource["service.name"] == "otel-test"
    counts = {(p.attributes["messaging.destination.name"], p.attributes.get("error.type")): p.value
              for p in consumed.points}
    # flaky: a retryable failure, then a success; declined: a permanent failure
    assert counts == {("payments", "retryable"): 1, ("payments", None): 1, ("payments", "permanent"): 1}
    for p in consumed.points:
        assert p.attributes["messaging.system"] == "oncely"
        assert p.attributes["messaging.operation.name"] == "process"
    duration = by_name["messaging.process.duration"]
    assert duration.kind == "histogram" and duration.unit == "s"
    assert sum(p.count or 0 for p in duration.points) == 3
    assert all(p.bounds[0] == 0.005 and p.bounds[-1] == 10 for p in duration.points)
    # The worker enqueued nothing: its export has no send metrics; the two `oncely enqueue`
    # processes each exported theirs before they exited.
    assert "messaging.client.sent.messages" not in by_name
    sent = [m for export in receiver.metric_exports for m in export if m.name == "messaging.client.sent.messages"]
    assert sorted(int(p.value or 0) for m in sent for p in m.points) == [1, 1]
    assert all(p.attributes["messaging.destination.name"] == "payments" for m in sent for p in m.points)


def test_a_refused_enqueue_sends_its_failed_span(db: Database, receiver: Receiver) -> None:
    env = otel_env(db, receiver)
    done = subprocess.run([env_path("ONCELY_BIN"), "enqueue", "flaky", "{}", "--queue", "payments",
                           "--depends-on", "987654321"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "depends_on" in done.stderr, done.stderr
    # Sent before the process exited, although the enqueue failed.
    (send,) = receiver.taken(lambda s: s.name == "send payments")
    assert send.kind == "producer" and send.status == "error"
    assert send.attr("error.type") == "enqueue_failed" and send.attr("messaging.message.id") is None
