"""The client against a real PostgreSQL: a freshly migrated schema per test (`oncely
migrate`). Skipped without ONCELY_TEST_DATABASE_URL and ONCELY_BIN (ctest sets both), unless
ONCELY_REQUIRE_PG says it must run."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import oncely

_schemas = itertools.count()


class Db:
    def __init__(self, url: str, oncely_bin: str) -> None:
        self.url = url
        self.schema = f"pyclient_{os.getpid()}_{next(_schemas)}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(DATABASE_URL=url, ONCELY_SCHEMA=self.schema)
        subprocess.run([oncely_bin, "migrate"], env=env, check=True, capture_output=True)
        subprocess.run([oncely_bin, "queue", "set", "default", "mode=lease", "max_attempts=3",
                        "backoff.base=50ms", "backoff.cap=100ms"], env=env, check=True,
                       capture_output=True)
        self.conn = psycopg.connect(url, autocommit=True)
        self.execute("CREATE TABLE {s}.effects (job bigint NOT NULL, note text NOT NULL)")

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(sql.SQL(query).format(s=sql.Identifier(self.schema)), params)
        return cur.fetchall() if cur.description else []

    def worker(self, **options: Any) -> oncely.Worker:
        options.setdefault("poll_interval", 0.05)
        options.setdefault("shutdown_grace", 1.0)
        return oncely.Worker(self.url, options.pop("queues", {"default": 2}), schema=self.schema, **options)

    def enqueue(self, kind: str, payload: Any = None, **kwargs: Any) -> int:
        return oncely.enqueue(self.conn, kind, payload, schema=self.schema, **kwargs)


@pytest.fixture
def db() -> Iterator[Db]:
    url, oncely_bin = os.environ.get("ONCELY_TEST_DATABASE_URL"), os.environ.get("ONCELY_BIN")
    if not url or not oncely_bin:
        if os.environ.get("ONCELY_REQUIRE_PG"):
            pytest.fail("ONCELY_TEST_DATABASE_URL and ONCELY_BIN must be set (ONCELY_REQUIRE_PG is)")
        pytest.skip("ONCELY_TEST_DATABASE_URL or ONCELY_BIN is not set")
    database = Db(url, oncely_bin)
    yield database
    database.execute("DROP SCHEMA {s} CASCADE")
    database.conn.close()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Running:
    """A worker's run() in a thread, stopped at the end of the `with`."""

    def __init__(self, worker: oncely.Worker) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as e:  # noqa: BLE001 - reported by __exit__
            self.error = e

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join(10)
        assert not self.thread.is_alive(), "run() did not return after stop()"
        if self.error is not None:
            raise self.error


def test_enqueue_commits_with_the_callers_transaction(db: Db) -> None:
    with pytest.raises(RuntimeError):
        with db.conn.transaction():
            db.enqueue("send", {"n": 1}, key="rolled-back")
            raise RuntimeError("the order failed")
    with db.conn.transaction():
        first = db.enqueue("send", {"n": 2}, unique_key="u-1", queue="emails", priority=-1)
        again = db.enqueue("send", {"n": 3}, unique_key="u-1", queue="emails")
        later = db.enqueue("send", None, run_at=timedelta(minutes=10))
    assert first == again
    rows = db.execute("SELECT id, kind, payload, queue, idempotency_key, priority, run_at > now() + interval '9 minutes'"
                      " FROM {s}.jobs ORDER BY id")
    assert rows == [(first, "send", {"n": 2}, "emails", None, -1, False), (later, "send", {}, "default", None, 0, True)]
    with db.conn.cursor() as cursor:  # a cursor works as well as a connection
        job = oncely.enqueue(cursor, "send", {}, key="k", schema=db.schema)
    assert db.execute("SELECT idempotency_key FROM {s}.jobs WHERE id = %s", (job,)) == [("k",)]


def test_a_traceparent_is_stored_with_the_job_and_reaches_its_handler(db: Db) -> None:
    # enqueue() has no argument for it: such a job is an INSERT with the same defaults and
    # refusals (and a unique job, through enqueue_unique(), stores none).
    producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with db.conn.transaction():
        parent = db.enqueue("trace", {"n": 1}, key="t-1", priority=-2, max_attempts=2,
                            run_at=timedelta(seconds=0), traceparent=producer)
        child = db.enqueue("trace", None, depends_on=[parent], traceparent=producer)
        unique = db.enqueue("trace", {}, unique_key="u", run_at=timedelta(minutes=10), traceparent=producer)
    rows = db.execute("SELECT id, payload, queue, idempotency_key, priority, max_attempts, depends_on, trace_context"
                      " FROM {s}.jobs ORDER BY id")
    assert rows == [(parent, {"n": 1}, "default", "t-1", -2, 2, None, producer),
                    (child, {}, "default", None, 0, None, [parent], producer),
                    (unique, {}, "default", None, 0, None, None, None)]
    with pytest.raises(oncely.ConfigError, match=r"^enqueue: job 999999 does not exist"):
        db.enqueue("trace", {}, depends_on=[999999], traceparent=producer)
    seen: list[str | None] = []
    worker = db.worker()

    @worker.handler("trace")
    def trace(job: oncely.Job) -> None:
        seen.append(job.traceparent)

    with Running(worker):
        wait_until(lambda: len(seen) == 2, "both traced jobs ran")
    assert seen == [producer, producer]


def test_a_child_waits_for_its_parent(db: Db) -> None:
    worker = db.worker()  # two slots: the child would run beside its parent if it did not wait
    order: list[str] = []  # list.append is atomic

    @worker.handler("step")
    def step(job: oncely.Job) -> None:
        order.append(f"{job.payload['name']} started")
        if job.payload["name"] == "parent":
            time.sleep(0.3)
        order.append(f"{job.payload['name']} done")

    parent = db.enqueue("step", {"name": "parent"})
    child = db.enqueue("step", {"name": "child"}, depends_on=[parent])
    assert db.execute("SELECT depends_on, parents_left FROM {s}.jobs WHERE id = %s", (child,)) == [([parent], 1)]
    with Running(worker):
        wait_until(lambda: db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)], "both jobs completed")
    assert order == ["parent started", "parent done", "child started", "child done"]
    with pytest.raises(oncely.ConfigError, match=r"^enqueue: job 999999 does not exist"):
        db.enqueue("step", {"name": "orphan"}, depends_on=[parent, 999999])


def test_a_closed_batch_enqueues_its_callback_once(db: Db) -> None:
    worker = db.worker()
    callbacks: list[dict[str, Any]] = []
    worker.register("member", lambda job: None)
    worker.register("report", lambda job: callbacks.append(job.payload))

    batch = oncely.open_batch(db.conn, on_finish={"kind": "report", "payload": {"day": 1}}, schema=db.schema)
    for n in range(3):
        db.enqueue("member", {"n": n}, batch_id=batch)
    oncely.close_batch(db.conn, batch, schema=db.schema)
    oncely.close_batch(db.conn, batch, schema=db.schema)  # again: nothing
    with Running(worker):
        wait_until(lambda: len(callbacks) == 1 and db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)],
                   "the members and the callback completed")
    assert callbacks == [{"day": 1, "batch_id": batch, "completed": 3, "dead": 0}]
    assert db.execute("SELECT count(*) FROM {s}.processed_jobs WHERE kind = 'report'") == [(1,)]

    with pytest.raises(oncely.ConfigError, match=f"^enqueue: batch {batch} is closed"):
        db.enqueue("member", batch_id=batch)
    with pytest.raises(oncely.ConfigError, match="^close_batch: batch 999999 does not exist"):
        oncely.close_batch(db.conn, 999999, schema=db.schema)
    with pytest.raises(oncely.ConfigError, match='^open_batch: on_failure: "kind" must be a non-empty string'):
        oncely.open_batch(db.conn, on_failure={"kind": ""}, schema=db.schema)


def test_effects_commit_with_the_completion_and_failures_roll_back(db: Db) -> None:
    worker = db.worker()
    seen = threading.Event()

    @worker.handler("write")
    def write(job: oncely.Job, tx: psycopg.Connection[Any]) -> None:
        tx.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(sql.Identifier(db.schema, "effects")),
                   (job.id, job.payload["note"]))
        if job.payload.get("fail"):
            raise RuntimeError("after writing")
        assert job.kind == "write" and job.queue == "default" and job.attempt == 1 and job.key == "k-1"
        seen.set()

    ok = db.enqueue("write", {"note": "kept"}, key="k-1")
    bad = db.enqueue("write", {"note": "rolled back", "fail": True})
    with Running(worker):
        wait_until(lambda: bool(db.execute("SELECT 1 FROM {s}.dead_letters")), "the failing job's dead letter")
    assert seen.is_set()
    assert db.execute("SELECT job, note FROM {s}.effects") == [(ok, "kept")]
    assert db.execute("SELECT job_id, attempts, error_class, last_error FROM {s}.dead_letters") == [
        (bad, 3, "exhausted", "RuntimeError: after writing")]
    assert db.execute("SELECT count(*) FROM {s}.processed_jobs") == [(1,)]


def test_permanent_errors_unknown_kinds_and_invalid_payloads_are_dead_letters(db: Db) -> None:
    worker = db.worker()

    def needs_to(payload: Any) -> None:
        if "to" not in payload:
            raise KeyError("to")

    @worker.handler("refuse")
    def refuse(job: oncely.Job, tx: psycopg.Connection[Any]) -> None:
        raise oncely.PermanentError("the card was declined")

    @worker.handler("mail", validate=needs_to)
    def mail(job: oncely.Job, tx: psycopg.Connection[Any]) -> None:
        raise AssertionError("not reached: the payload is invalid")

    ids = [db.enqueue("refuse"), db.enqueue("mystery"), db.enqueue("mail", {"subject": "hi"})]
    with Running(worker):
        wait_until(lambda: db.execute("SELECT count(*) FROM {s}.dead_letters") == [(3,)], "three dead letters")
    rows = db.execute("SELECT job_id, attempts, error_class, last_error FROM {s}.dead_letters ORDER BY job_id")
    assert [(r[0], r[1], r[2]) for r in rows] == [(i, 1, "permanent") for i in ids]
    assert rows[0][3] == "PermanentError: the card was declined"
    assert rows[1][3].startswith("UnknownKind: no handler for kind 'mystery'")
    assert rows[2][3] == "InvalidPayload: invalid payload: KeyError: 'to'"


def test_a_handlers_return_value_is_its_jobs_output_in_its_completed_record(db: Db) -> None:
    worker = db.worker(name="py-test-worker")

    @worker.handler("charge")
    def charge(job: oncely.Job, tx: psycopg.Connection[Any]) -> dict[str, Any]:
        return {"charge": f"ch_{job.key}", "cents": 12345678901234567}

    @worker.handler("ping")
    def ping(job: oncely.Job) -> list[int]:  # job-only: completed in a batch, with its output
        return [1, 2, 3]

    @worker.handler("quiet")
    def quiet(job: oncely.Job) -> None:
        return None

    @worker.handler("huge")
    def huge(job: oncely.Job, tx: psycopg.Connection[Any]) -> str:
        return "x" * 70000

    @worker.handler("opaque")
    def opaque(job: oncely.Job) -> object:
        return object()

    charged = db.enqueue("charge", key="payment-1001")
    pinged, quieted = db.enqueue("ping"), db.enqueue("quiet")
    too_big, not_json = db.enqueue("huge"), db.enqueue("opaque")
    with Running(worker):
        wait_until(lambda: db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)], "every job settled")
    records = {r[0]: r[1:] for r in db.execute(
        "SELECT job_id, output::text, attempt, worker, run_time IS NOT NULL FROM {s}.processed_jobs")}
    assert records[charged] == ('{"cents": 12345678901234567, "charge": "ch_payment-1001"}', 1, "py-test-worker", True)
    assert records[pinged] == ("[1, 2, 3]", 1, "py-test-worker", True)
    assert records[quieted] == (None, 1, "py-test-worker", True)
    dead: dict[int, str] = {r[0]: r[1] for r in db.execute(
        "SELECT job_id, last_error FROM {s}.dead_letters WHERE error_class = 'permanent'")}
    assert dead[too_big] == "PermanentError: output is 70002 bytes of JSON, over the limit of 65536 (64 KiB)"
    assert dead[not_json].startswith("PermanentError: the handler returned object, which is not JSON")
    assert too_big not in records and not_json not in records


def test_retry_in_sets_the_next_run(db: Db) -> None:
    worker = db.worker()

    @worker.handler("later")
    def later(job: oncely.Job, tx: psycopg.Connection[Any]) -> None:
        raise oncely.RetryIn(120, "rate limited")

    job = db.enqueue("later")
    with Running(worker):
        wait_until(lambda: db.execute("SELECT attempts FROM {s}.jobs WHERE lease_token IS NULL") == [(1,)], "the retry")
    assert db.execute("SELECT run_at - now() BETWEEN interval '100 s' AND interval '121 s', last_error "
                      "FROM {s}.jobs WHERE id = %s", (job,)) == [(True, "RetryIn: rate limited")]


def test_stop_gives_back_a_running_job_after_the_grace(db: Db) -> None:
    worker = db.worker(shutdown_grace=0.2)
    started, told = threading.Event(), threading.Event()

    @worker.handler("long")
    def long(job: oncely.Job, tx: psycopg.Connection[Any]) -> None:
        started.set()
        if job.lease_lost.wait(30):
            told.set()
            raise RuntimeError("stopped")

    job = db.enqueue("long")
    with Running(worker):
        assert started.wait(10)
    assert told.is_set()
    assert db.execute("SELECT id, attempts, lease_token FROM {s}.jobs") == [(job, 0, None)]


def test_a_transaction_mode_queue_is_refused_at_start(db: Db) -> None:
    worker = db.worker(queues={"txq": 1})
    worker.register("noop", lambda job, tx: None)
    with pytest.raises(oncely.ConfigError, match="lease queue"):
        worker.run()


def test_a_handler_that_commits_itself_fails_its_attempt(db: Db) -> None:
    worker = db.worker()

    @worker.handler("rogue")
    def rogue(job: oncely.Job, tx: psycopg.Connection[Any]) -> None:
        tx.execute("COMMIT")

    job = db.enqueue("rogue", max_attempts=1)
    with Running(worker):
        wait_until(lambda: bool(db.execute("SELECT 1 FROM {s}.dead_letters")), "the dead letter")
    [(job_id, last_error, detail)] = db.execute("SELECT job_id, last_error, error_detail FROM {s}.dead_letters")
    assert job_id == job and last_error.startswith("HandlerEndedTransaction")
    assert detail["exception"] == "HandlerEndedTransaction" and "Traceback" in detail["stack"]


def test_a_schema_that_was_not_migrated_is_a_config_error(db: Db) -> None:
    worker = oncely.Worker(db.url, {"default": 1}, schema=db.schema + "_missing")
    worker.register("noop", lambda job, tx: None)
    with pytest.raises(oncely.ConfigError, match="migrate"):
        worker.run()


def test_stop_before_run_returns_at_once(db: Db) -> None:
    worker = db.worker()
    worker.register("noop", lambda job, tx: None)
    worker.stop()
    started = time.monotonic()
    worker.run()
    assert time.monotonic() - started < 5


def test_a_handler_that_swallows_an_sql_error_fails_its_attempt(db: Db) -> None:
    worker = db.worker()

    @worker.handler("swallow")
    def swallow(job: oncely.Job, tx: psycopg.Connection[Any]) -> None:
        try:
            tx.execute("SELECT 1/0")
        except psycopg.errors.DivisionByZero:
            pass

    db.enqueue("swallow", max_attempts=1)
    with Running(worker):
        wait_until(lambda: bool(db.execute("SELECT 1 FROM {s}.dead_letters")), "the dead letter")
    [(last_error,)] = db.execute("SELECT last_error FROM {s}.dead_letters")
    assert "the transaction is aborted" in last_error


def test_a_queue_held_back_by_its_rate_is_leased_again_when_the_window_moves_on(db: Db) -> None:
    # No commit announces a rate window moving on: after a lease that the rate cut short,
    # the worker leases again when limits_retry_in() says, not at its poll (5 s: 6 jobs at
    # 2 a second took about 10 s).
    db.execute("SELECT {s}.set_queue_limits('default', NULL, NULL, NULL, 2, interval '1 second')")
    db.execute("INSERT INTO {s}.jobs (kind) SELECT 'noop' FROM generate_series(1, 6)")
    worker = db.worker(poll_interval=5)
    worker.register("noop", lambda job: None)
    started = time.monotonic()
    with Running(worker):
        wait_until(lambda: db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)], "six jobs done", timeout_s=15)
        took = time.monotonic() - started
    assert 1.9 < took < 3.5, f"6 jobs at 2 a second took {took:.1f} s"  # the third pair starts 2 s after the first


def test_a_schema_without_limits_retry_in_still_leases(db: Db, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="oncely")
    db.execute("DROP FUNCTION {s}.limits_retry_in(text)")  # as before version 23
    worker = db.worker()
    worker.register("noop", lambda job: None)
    with Running(worker):
        for _ in range(3):  # each lease comes back short
            db.enqueue("noop")
            wait_until(lambda: db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)], "the job done")
    assert db.execute("SELECT count(*) FROM {s}.processed_jobs") == [(3,)]
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def most_leased_while_one_runs(db: Db, queue: str, **options: Any) -> int:
    """Runs a worker of concurrency 1 on `queue`, with 5 jobs whose handler blocks; returns
    the most jobs of the queue that were leased at once while the first one ran."""
    worker = db.worker(queues={queue: 1}, **options)
    running, done = threading.Event(), threading.Event()

    @worker.handler("block")
    def block(job: oncely.Job) -> None:
        running.set()
        done.wait(10)

    db.execute("INSERT INTO {s}.jobs (queue, kind) SELECT %s, 'block' FROM generate_series(1, 5)", (queue,))
    leased = 0
    with Running(worker):
        assert running.wait(10)
        deadline = time.monotonic() + 0.5  # 10 polls: time enough to lease ahead
        while time.monotonic() < deadline:
            [(n,)] = db.execute("SELECT count(*) FROM {s}.jobs WHERE queue = %s AND lease_token IS NOT NULL", (queue,))
            leased = max(leased, n)
            time.sleep(0.02)
        done.set()
    return leased


def test_a_queue_with_limits_across_workers_leases_nothing_ahead(db: Db, caplog: pytest.LogCaptureFixture) -> None:
    # A job leased ahead holds one of the queue's slots (its live lease counts as running)
    # and its start in the rate window while it waits in the worker without running.
    db.execute("SELECT {s}.set_queue_limits('default', 2, NULL, NULL)")
    assert most_leased_while_one_runs(db, "default") == 1
    caplog.set_level(logging.WARNING, logger="oncely")
    assert most_leased_while_one_runs(db, "default", prefetch=3) == 1  # an explicit prefetch too, with a warning
    assert [r.getMessage() for r in caplog.records] == [
        "queue 'default' has limits across workers: jobs are not leased ahead (prefetch ignored for it)"]


def test_a_queue_without_limits_leases_ahead(db: Db) -> None:
    assert most_leased_while_one_runs(db, "default") == 2  # its concurrency, 1, leased ahead


def test_limits_set_while_it_runs_stop_the_leases_ahead_once_they_hold_one_back(db: Db) -> None:
    worker = db.worker(queues={"default": 2})  # room for 4: 2 running, 2 ahead
    running, done = threading.Semaphore(0), threading.Event()

    @worker.handler("block")
    def block(job: oncely.Job) -> None:
        running.release()
        done.wait(10)

    leased = 0
    with Running(worker):
        time.sleep(0.2)  # started: it saw no limits
        db.execute("SELECT {s}.set_queue_limits('default', 1, NULL, NULL)")
        db.execute("INSERT INTO {s}.jobs (kind) SELECT 'block' FROM generate_series(1, 6)")
        assert running.acquire(timeout=10)  # one lease of 4 came back with 1: limits_retry_in() is not NULL
        time.sleep(0.2)
        db.execute("SELECT {s}.set_queue_limits('default', 10, NULL, NULL)")
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            [(n,)] = db.execute("SELECT count(*) FROM {s}.jobs WHERE lease_token IS NOT NULL")
            leased = max(leased, n)
            time.sleep(0.02)
        done.set()
    assert leased == 2  # its free slots, not 2 more ahead


def test_a_schema_without_queue_limits_held_leases_ahead(db: Db) -> None:
    db.execute("DROP FUNCTION {s}.queue_limits_held(text)")  # as before version 23
    assert most_leased_while_one_runs(db, "default") == 2


# -- job-only handlers: fn(job), completed in batches by the completer ------------------------


def connections(db: Db, application_name: str) -> int:
    [(n,)] = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name,))
    return int(n)


def run_job_only(db: Db, jobs: int, concurrency: int, handler_s: float) -> tuple[int, int]:
    """Runs `jobs` jobs of a job-only handler that waits `handler_s`; checks that each ran
    once and has one marker; returns how many commits completed them, and the most
    connections the worker held meanwhile."""
    app = f"oncely-test-{db.schema}"
    worker = oncely.Worker(make_conninfo(db.url, application_name=app), {"default": concurrency}, schema=db.schema,
                           poll_interval=0.05, shutdown_grace=1.0)
    runs: list[int] = []  # list.append is atomic

    @worker.handler("mail")
    def mail(job: oncely.Job) -> None:
        time.sleep(handler_s)
        runs.append(job.id)

    ids = sorted(row[0] for row in db.execute("INSERT INTO {s}.jobs (kind) SELECT 'mail' "
                                              "FROM generate_series(1, %s) RETURNING id", (jobs,)))
    peak = 0

    def all_done() -> bool:
        nonlocal peak
        peak = max(peak, connections(db, app))
        return db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)]

    with Running(worker):
        wait_until(all_done, f"{jobs} completions", timeout_s=60)
    assert sorted(runs) == ids  # each handler ran once
    markers = db.execute("SELECT job_id, processed_at FROM {s}.processed_jobs")
    assert sorted(m[0] for m in markers) == ids  # one marker each
    # processed_at is now(), the start of its transaction: one value per commit.
    return len({m[1] for m in markers}), peak


def test_job_only_handlers_complete_in_batches(db: Db) -> None:
    commits, _ = run_job_only(db, 500, concurrency=20, handler_s=0)
    assert commits <= 100, f"{commits} commits for 500 jobs"  # about 20 here: 25 jobs a commit


def test_job_only_handlers_hold_three_connections_whatever_the_concurrency(db: Db) -> None:
    commits, peak = run_job_only(db, 500, concurrency=20, handler_s=0.05)  # ~1.5 s: the renewal connects too
    assert peak == 3, f"the worker held {peak} connections"
    assert commits <= 250, f"{commits} commits for 500 jobs"  # about 70 here: handlers return in waves


def test_a_prefetch_beyond_one_lease_call_leases_again_without_waiting_for_the_poll(db: Db) -> None:
    # lease_jobs() returns at most 1000 jobs: a lease that asked for that many and got them
    # came back full, and the queue is leased again as soon as half the prefetch has room.
    # (Comparing with the whole room, 1004 here, took it for an empty queue: the rest waited
    # for the next poll, a minute away.)
    worker = db.worker(queues={"default": 4}, prefetch=1000, poll_interval=60)
    worker.register("noop", lambda job: None)
    db.execute("INSERT INTO {s}.jobs (kind) SELECT 'noop' FROM generate_series(1, 3000)")
    with Running(worker):
        wait_until(lambda: db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)], "every job", timeout_s=20)
    assert db.execute("SELECT count(*) FROM {s}.processed_jobs") == [(3000,)]


def test_the_completer_reconnects_and_completes_every_job(db: Db, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="oncely")
    app = f"oncely-test-{db.schema}"
    worker = oncely.Worker(make_conninfo(db.url, application_name=app), {"default": 10}, schema=db.schema,
                           poll_interval=0.05, shutdown_grace=1.0)
    worker.register("mail", lambda job: time.sleep(0.01))
    db.execute("INSERT INTO {s}.jobs (kind) SELECT 'mail' FROM generate_series(1, 1000)")
    with Running(worker):
        wait_until(lambda: db.execute("SELECT count(*) > 0 FROM {s}.processed_jobs") == [(True,)], "a completion")
        killed = db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s "
                            "AND query LIKE '%%complete_jobs%%'", (app,))
        wait_until(lambda: db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)], "every completion", timeout_s=60)
    assert killed == [(True,)]
    assert any("completer: database connection failed" in r.getMessage() for r in caplog.records)
    assert db.execute("SELECT count(*), count(DISTINCT job_id) FROM {s}.processed_jobs") == [(1000, 1000)]


def test_a_job_only_handler_whose_lease_was_taken_is_not_completed(db: Db, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="oncely")
    worker = db.worker()
    started, resume = threading.Event(), threading.Event()

    @worker.handler("mail")
    def mail(job: oncely.Job) -> None:
        started.set()
        assert resume.wait(10)

    job = db.enqueue("mail")
    with Running(worker):
        assert started.wait(10)
        with db.conn.transaction():  # the lease expires and another worker takes the job, at once
            db.execute("UPDATE {s}.jobs SET run_at = now() - interval '1 second' WHERE id = %s", (job,))
            [(token, attempt)] = db.execute("SELECT lease_token, attempt FROM {s}.lease_jobs('default', 1, NULL, "
                                            "'thief')")
        resume.set()
        wait_until(lambda: any("not completed, another attempt owns it" in r.getMessage() and f"id={job}" in
                               r.getMessage() for r in caplog.records), "the completer's warning")
    assert attempt == 2
    assert db.execute("SELECT lease_token FROM {s}.jobs WHERE id = %s", (job,)) == [(token,)]
    assert db.execute("SELECT count(*) FROM {s}.processed_jobs") == [(0,)]
    assert db.execute("SELECT id FROM {s}.complete_jobs(%s, %s) AS id", ([job], [token])) == [(job,)]
    assert db.execute("SELECT job_id FROM {s}.processed_jobs") == [(job,)]  # exactly once


def test_transactional_and_job_only_handlers_in_one_worker(db: Db) -> None:
    worker = db.worker(queues={"default": 4})
    mailed: list[int] = []

    @worker.handler("write")
    def write(job: oncely.Job, tx: psycopg.Connection[Any]) -> None:
        tx.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'written')").format(sql.Identifier(db.schema, "effects")),
                   (job.id,))

    @worker.handler("mail")
    def mail(job: oncely.Job) -> None:
        mailed.append(job.id)

    @worker.handler("refuse")
    def refuse(job: oncely.Job) -> None:
        raise oncely.PermanentError("no such address")

    @worker.handler("flaky")
    def flaky(job: oncely.Job) -> None:
        if job.attempt == 1:
            raise RuntimeError("the mail server timed out")

    written = [db.enqueue("write") for _ in range(10)]
    sent = [db.enqueue("mail") for _ in range(10)]
    refused, retried = db.enqueue("refuse"), db.enqueue("flaky")
    with Running(worker):
        wait_until(lambda: db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)], "every job settled")
    assert sorted(r[0] for r in db.execute("SELECT job FROM {s}.effects")) == written
    assert sorted(mailed) == sent
    assert sorted(r[0] for r in db.execute("SELECT job_id FROM {s}.processed_jobs")) == sorted(written + sent +
                                                                                                [retried])
    assert db.execute("SELECT job_id, attempts, error_class, last_error FROM {s}.dead_letters") == [
        (refused, 1, "permanent", "PermanentError: no such address")]


SIGTERM_WORKER = """
import os, sys, time, logging
import oncely

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
worker = oncely.Worker(os.environ["DSN"], {"default": 4}, schema=os.environ["SCHEMA"], poll_interval=0.05,
                       shutdown_grace=1.0)
out = open(os.environ["OUT"], "a", buffering=1)

@worker.handler("short")
def short(job):
    out.write(f"start {job.id}\\n")
    time.sleep(0.3)
    out.write(f"done {job.id}\\n")

@worker.handler("long")
def long(job):
    out.write(f"start {job.id}\\n")
    if job.lease_lost.wait(30):
        raise RuntimeError("stopped")

worker.run()
"""


def test_sigterm_drains_job_only_handlers_and_flushes_their_completions(db: Db, tmp_path: Path) -> None:
    out = tmp_path / "handlers.log"
    out.touch()
    long_job = db.enqueue("long", priority=-1)
    shorts = [db.enqueue("short") for _ in range(20)]
    env = dict(os.environ, DSN=db.url, SCHEMA=db.schema, OUT=str(out),
               PYTHONPATH=str(Path(__file__).resolve().parent.parent / "src"))
    proc = subprocess.Popen([sys.executable, "-c", SIGTERM_WORKER], env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: out.read_text().count("done ") >= 3, "three short handlers returned")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "gave back 1 job(s) still running after the grace" in stderr, stderr
    done = {int(line.split()[1]) for line in out.read_text().splitlines() if line.startswith("done ")}
    # Every handler that returned has its completion committed, and no other job has.
    assert {r[0] for r in db.execute("SELECT job_id FROM {s}.processed_jobs")} == done
    # The rest were given back, their attempts not charged: nothing is still leased.
    left = db.execute("SELECT id, attempts, lease_token FROM {s}.jobs ORDER BY id")
    assert [r[0] for r in left] == sorted({long_job, *shorts} - done)
    assert all(attempts == 0 and token is None for _, attempts, token in left), left

    worker = db.worker(queues={"default": 4})
    worker.register("short", lambda job: None)
    worker.register("long", lambda job: None)
    with Running(worker):
        wait_until(lambda: db.execute("SELECT count(*) FROM {s}.jobs") == [(0,)], "the rest completed")
    assert db.execute("SELECT count(*), count(DISTINCT job_id) FROM {s}.processed_jobs") == [(21, 21)]
