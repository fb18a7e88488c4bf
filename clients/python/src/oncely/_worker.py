"""The worker: leases jobs of its queues, runs their handlers in threads, completes each
job in the transaction that holds its handler's writes, or in a batch when its handler has
no writes to fence, renews the leases it holds, and gives its jobs back when it stops. It
speaks only the SQL worker protocol (docs/protocol.md).

Threads and connections (each connection has exactly one owner thread):
- the thread that calls `run()`: the dispatcher. Its connection LISTENs on "<schema>.jobs"
  and calls lease_jobs() for queues with free slots, on a notification, on a freed slot of a
  busy queue, on the poll, or, for a queue whose limits held a lease back, when
  limits_retry_in() says they may let one in;
- per queue, `concurrency` handler threads (slots). A transactional handler `fn(job, tx)`
  runs on its slot's connection, opened for the first one: handler, then complete_job() in
  one transaction; or fail_job()/release_jobs() after it. A job-only handler `fn(job)` runs
  holding no connection, and hands its job to the completer;
- the completer (_completer.py), with its own connection: complete_jobs() for the job-only
  handlers' jobs, a batch at a time, and their fail_job()/release_jobs();
- one renewal thread with its own connection: renew_leases() for every held lease.
So a worker holds 3 connections, plus one per slot that has run a transactional handler:
3 whatever its concurrency when its handlers are all job-only, sum(concurrency) + 3 at most.
"""

from __future__ import annotations

import logging
import os
import queue as queue_mod
import random
import select
import signal
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from . import _tracing
from ._completer import Completer
from ._output import output_text
from ._errors import ConfigError, InvalidPayload, PermanentError, UnknownKind
from ._handler import Connection, Handler, takes_transaction
from ._job import Job
from ._options import MAX_JOBS_PER_LEASE, Options, check_options
from ._outcome import ALREADY_PROCESSED, LEASE_LOST, Action, Outcome, decide, describe
from ._sql import Statements

log = logging.getLogger("oncely")

H = TypeVar("H", bound=Handler)

MAX_ERROR_CHARS = 2000  # of the message stored in errors[] and last_error
MAX_STACK_CHARS = 8000  # of the traceback stored as the attempt's "stack"
SLOT_EXIT_WAIT_S = 2.0  # after the grace: how long handlers that were told to stop may take to return
QUERY_CANCELED = "57014"  # statement_timeout: an attempt of class timeout
FLUSH_WAIT_S = 5.0  # at shutdown: how long the completer may try to reach the database to settle what waits


@dataclass(frozen=True)
class _Registration:
    fn: Callable[..., object]
    validate: Callable[[Any], object] | None
    transactional: bool  # fn(job, tx) in a transaction of its own; else fn(job), completed in a batch


@dataclass
class _Held:
    job: Job
    stopped: bool = False  # set past the shutdown grace: the job was given back
    returned: bool = False  # its handler returned: a lease found lost now has nothing to stop
    handed_over: bool = False  # its settlement waits in the completer, which owns it until it commits
    spans: _tracing.Attempt | None = None  # its attempt's spans, when opentelemetry is installed


class Worker:
    """Runs handlers for the jobs of its queues (lease queues: `oncely queue set Q mode=lease`).

    Register handlers with `@worker.handler(kind)` before `run()`. `run()` blocks until
    `stop()` (any thread) or, when called on the main thread, SIGTERM/SIGINT; a second stop
    ends the shutdown grace at once. A Worker runs once.

    A transactional handler is `fn(job, tx)`: `tx` is a psycopg connection inside the
    transaction in which the worker calls complete_job() once the handler returns, so the
    handler's writes through `tx` commit with the job's completion, or not at all. The
    handler must not commit.

    A job-only handler is `fn(job)`: it has no database writes to fence, so it runs holding no
    connection, and its job is completed in a batch with others (complete_jobs()) after it
    returns. The signature tells the two apart (_handler.py); `transaction=` says it outright.
    """

    def __init__(self, dsn: str, queues: Mapping[str, int], *, schema: str = "oncely", name: str | None = None,
                 poll_interval: float = 1.0, shutdown_grace: float = 30.0, lease: float | None = None,
                 renew_interval: float = 1.0, prefetch: int | None = None) -> None:
        self._dsn = dsn  # never logged
        self.options: Options = check_options(queues, schema=schema, name=name, poll_interval=poll_interval,
                                              shutdown_grace=shutdown_grace, lease=lease,
                                              renew_interval=renew_interval, prefetch=prefetch)
        self._sql = Statements.for_schema(self.options.schema)
        self._handlers: dict[str, _Registration] = {}
        self._stopping = threading.Event()
        self._hurry = threading.Event()  # a second stop: end the grace now
        self._done = threading.Event()  # the renewal thread's stop
        self._started = False
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # notified when a held job is settled
        self._held: dict[int, _Held] = {}  # by lease token: leased and not settled yet
        # Per queue: how many more jobs it may hold (running or waiting for a slot), and how
        # much room a busy queue waits for before it leases again (so that leases come in batches).
        self._room = {q: n + self.options.ahead(q) for q, n in self.options.queues.items()}
        self._refill = {q: max(1, self.options.ahead(q) // 2) for q in self.options.queues}
        self._not_ahead: set[str] = set()  # queues with limits across workers: nothing leased ahead
        self._freed: set[str] = set()  # queues with room freed since the dispatcher last looked
        self._work: dict[str, queue_mod.Queue[Job | None]] = {q: queue_mod.Queue() for q in self.options.queues}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._pipe_open = True
        self._rng = random.Random()
        self._has_limits_retry_in = True  # until a schema before version 23 says otherwise
        self._completer = Completer(self._connect, self._sql.complete_jobs, self._settle, self._let_go,
                                    reported=self._reported,
                                    complete_jobs_with_outputs=self._sql.complete_jobs_with_outputs)

    # -- registration ------------------------------------------------------------------

    def handler(self, kind: str, *, validate: Callable[[Any], object] | None = None,
                transaction: bool | None = None) -> Callable[[H], H]:
        """Registers the decorated function as the handler of `kind`.

        `validate(payload)`, when given, runs before the handler; if it raises, the job is a
        dead letter (`InvalidPayload`), never retried: a payload that is wrong now is wrong on
        every attempt.

        `transaction`: True calls it as `fn(job, tx)` in a transaction of its own, False as
        `fn(job)` with its job completed in a batch; None (the default) decides by the
        signature: transactional if it can be called with two positional arguments."""
        def register(fn: H) -> H:
            self.register(kind, fn, validate=validate, transaction=transaction)
            return fn
        return register

    def register(self, kind: str, fn: Handler, *, validate: Callable[[Any], object] | None = None,
                 transaction: bool | None = None) -> None:
        """Registers `fn` as the handler of `kind` (the decorator's plain form)."""
        if self._started:
            raise ConfigError("handlers must be registered before run()")
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"a handler's kind must be a non-empty string, not {kind!r}")
        if not callable(fn) or (validate is not None and not callable(validate)):
            raise ConfigError(f"the handler of {kind!r} and its validate must be callable")
        if kind in self._handlers:
            raise ConfigError(f"kind {kind!r} has a handler already")
        if transaction is not None and not isinstance(transaction, bool):
            raise ConfigError(f"the handler of {kind!r}: transaction must be True, False or None, not {transaction!r}")
        self._handlers[kind] = _Registration(fn, validate, takes_transaction(kind, fn, transaction))

    # -- control -----------------------------------------------------------------------

    def stop(self) -> None:
        """Asks `run()` to stop: no more leases; running handlers get the shutdown grace. A
        second call ends the grace at once. Safe from any thread, a signal handler, or
        before `run()`."""
        if self._stopping.is_set():
            self._hurry.set()
        self._stopping.set()
        self._wake(b"s")

    def _wake(self, why: bytes) -> None:
        """Wakes the dispatcher (from any thread, or a signal handler)."""
        if not self._pipe_open:
            return
        try:
            os.write(self._wake_w, why)
        except OSError:
            pass  # the pipe is full (the dispatcher will wake anyway) or closed (run() ended)

    def run(self) -> None:
        """Runs until stopped; returns once every job it held is settled or given back.

        Raises ConfigError at start when a queue is not a lease queue or has no handler at
        all to run; psycopg.OperationalError when the database cannot be reached at start.
        Later connection losses are logged and retried."""
        if self._started:
            raise ConfigError("a Worker runs once")
        self._started = True
        if not self._handlers:
            raise ConfigError("no handler registered: use @worker.handler(kind)")
        restore = self._install_signal_handlers()
        try:
            conn = self._connect()
            try:
                self._preflight(conn)
                threads = self._start_threads()
                log.info("worker started name=%s queues=%s schema=%s kinds=%s", self.options.name,
                         ",".join(f"{q}:{n}" for q, n in self.options.queues.items()), self.options.schema,
                         ",".join(sorted(self._handlers)))
                try:
                    conn = self._dispatch(conn)
                finally:  # whatever ended the dispatcher, the jobs held are settled or given back
                    self._stopping.set()
                    conn = self._drain(conn, threads)
            finally:
                conn.close()
        finally:
            restore()
            self._pipe_open = False  # stop() and stuck handlers must not write to a reused fd
            os.close(self._wake_r)
            os.close(self._wake_w)
        log.info("worker stopped name=%s", self.options.name)

    # -- start ---------------------------------------------------------------------------

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.stop()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for s, h in previous.items():
                signal.signal(s, h)
        return restore

    def _connect(self) -> Connection:
        return psycopg.connect(self._dsn, autocommit=True)

    def _preflight(self, conn: Connection) -> None:
        """Every queue must be a lease queue (lease_jobs() refuses the others with OC103), and
        job-only handlers need complete_jobs(). A queue with limits across workers leases
        nothing ahead."""
        for queue in self.options.queues:
            try:
                row = conn.execute(self._sql.queue_policy, (queue,)).fetchone()
            except (psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName) as e:
                raise ConfigError(f"schema {self.options.schema!r} has no oncely functions: migrate it "
                                  f"(ONCELY_SCHEMA={self.options.schema} oncely migrate), or give the right "
                                  "schema") from e
            mode, lease_s = (row[0], float(row[1])) if row else ("transaction", 30.0)
            if mode != "lease":
                raise ConfigError(f"queue {queue!r} is a {mode}-mode queue; this worker needs a lease queue "
                                  f"(oncely queue set {queue} mode=lease)")
            lease = self.options.lease or lease_s
            if self.options.renew_interval > lease / 2:
                log.warning("queue=%s: renew_interval %.1fs is more than half its lease %.1fs: leases may be lost",
                            queue, self.options.renew_interval, lease)
            if self._has_limits(conn, queue):
                self._lease_nothing_ahead(queue)
                if self.options.prefetch:
                    log.warning("queue %r has limits across workers: jobs are not leased ahead (prefetch ignored "
                                "for it)", queue)
        job_only = sorted(kind for kind, r in self._handlers.items() if not r.transactional)
        if job_only:
            row = conn.execute(self._sql.has_complete_jobs, (self.options.schema,)).fetchone()
            if not (row and row[0]):
                raise ConfigError(f"the job-only handlers ({', '.join(job_only)}) need complete_jobs(), schema "
                                  f"version 20: migrate schema {self.options.schema!r} (oncely migrate)")

    def _start_threads(self) -> list[threading.Thread]:
        # Daemon threads: a handler that never returns must not keep the process alive after
        # run() has given its job back.
        threads = [threading.Thread(target=self._slot, args=(q,), name=f"oncely-{q}-{i}", daemon=True)
                   for q, n in self.options.queues.items() for i in range(n)]
        threads.append(threading.Thread(target=self._renew, name="oncely-renew", daemon=True))
        for t in threads:
            t.start()
        self._completer.start()
        return threads

    # -- the dispatcher: wake-ups and leases -----------------------------------------------

    def _dispatch(self, conn: Connection) -> Connection:
        """Leases until stopped; returns its (possibly reconnected) connection."""
        queues = list(self.options.queues)
        pending: set[str] = set(queues)  # queues to lease now
        busy: set[str] = set()  # queues whose last lease came back full: lease again when a slot frees
        # Queues held back by their limits: lease again then (no commit announces a rate
        # window moving on or a lease expiring), or at the poll if that comes first.
        retry_at: dict[str, float] = {}
        next_poll = 0.0
        failures = 0
        conn.add_notify_handler(lambda n: pending.update(self._queues_in(n.payload)))
        listening = False
        while not self._stopping.is_set():
            try:
                if not listening:
                    conn.execute(self._sql.listen)
                    listening = True
                now = time.monotonic()
                if now >= next_poll:
                    pending.update(queues)
                    next_poll = now + self.options.poll_interval * self._rng.uniform(0.9, 1.1)
                pending.update(q for q, at in retry_at.items() if at <= now)
                with self._lock:
                    pending.update(q for q in self._freed & busy if self._room[q] >= self._refill[q])
                    self._freed.clear()
                for queue in [q for q in queues if q in pending]:
                    pending.discard(queue)
                    retry_at.pop(queue, None)
                    with self._lock:
                        room = self._room[queue]
                    asked = min(room, MAX_JOBS_PER_LEASE)
                    if room <= 0:  # below 0: jobs leased ahead before its limits were seen
                        busy.add(queue)  # a notification for a full queue: lease when a slot frees
                    elif self._lease(conn, queue, asked) == asked:
                        busy.add(queue)
                        pending.add(queue)  # there may be more: lease again once a slot frees
                    else:
                        busy.discard(queue)
                        if (retry_in := self._limits_retry_in(conn, queue)) is not None:
                            retry_at[queue] = time.monotonic() + retry_in
                failures = 0
                with self._lock:
                    ready_now = any(self._room[q] >= self._refill[q] for q in self._freed & busy)
                if ready_now or self._stopping.is_set():
                    continue
                self._wait(conn, max(0.0, min([next_poll, *retry_at.values()]) - time.monotonic()), pending)
            except psycopg.OperationalError as e:
                failures += 1
                log.error("dispatcher: database connection failed (%s); reconnecting", describe(e))
                conn.close()
                self._stopping.wait(min(0.1 * 2 ** failures, 5.0))
                try:
                    conn = self._connect()
                    conn.add_notify_handler(lambda n: pending.update(self._queues_in(n.payload)))
                    listening = False
                    pending.update(queues)
                except psycopg.OperationalError:
                    pass
            except psycopg.Error as e:
                log.error("dispatcher: %s", describe(e))
                self._stopping.wait(self.options.poll_interval)
        return conn

    def _queues_in(self, payload: str) -> set[str]:
        """The queues a wake-up names (comma-separated, or '*': every queue)."""
        if payload == "*":
            return set(self.options.queues)
        return {q for q in payload.split(",") if q in self._room}

    def _wait(self, conn: Connection, timeout: float, pending: set[str]) -> None:
        """Waits for a notification, a freed slot, a stop, or the timeout (the poll)."""
        ready, _, _ = select.select([conn.fileno(), self._wake_r], [], [], timeout)
        if self._wake_r in ready:
            try:
                os.read(self._wake_r, 4096)
            except BlockingIOError:
                pass
        if conn.fileno() in ready:
            pgconn = conn.pgconn
            pgconn.consume_input()
            if pgconn.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("the connection was lost while listening")
            while (n := pgconn.notifies()) is not None:
                pending.update(self._queues_in(n.extra.decode(errors="replace")))

    def _lease(self, conn: Connection, queue: str, max_jobs: int) -> int:
        rows = conn.execute(self._sql.lease_jobs,
                            (queue, max_jobs, self.options.lease, self.options.name)).fetchall()
        for id_, kind, payload, key, attempt, token, expires_at, trace in rows:
            job = Job(id=id_, kind=kind, queue=queue, payload=payload, key=key, attempt=attempt, lease_token=token,
                      lease_expires_at=expires_at, traceparent=trace)
            with self._lock:
                self._held[token] = _Held(job)
                self._room[queue] -= 1
            self._work[queue].put(job)
        if rows:
            log.debug("leased queue=%s jobs=%d", queue, len(rows))
        return len(rows)

    def _limits_retry_in(self, conn: Connection, queue: str) -> float | None:
        """After a lease that came back short: in how many seconds the queue's limits may let
        a lease find room, or None (no limits, or nothing held back but the lack of jobs)."""
        if not self._has_limits_retry_in:
            return None
        try:
            row = conn.execute(self._sql.limits_retry_in, (queue,)).fetchone()
        except psycopg.errors.UndefinedFunction:  # a schema before version 23, which has no rates
            self._has_limits_retry_in = False
            return None
        if not row or row[0] is None:
            return None
        if queue not in self._not_ahead and self.options.ahead(queue):  # only limits hold leases back
            log.info("queue=%s: its limits across workers held a lease back: no more jobs leased ahead for it", queue)
            self._lease_nothing_ahead(queue)
        return float(row[0])

    def _has_limits(self, conn: Connection, queue: str) -> bool:
        """Whether the queue has limits across workers, read at start (limits set later are
        seen at the next start, or once limits_retry_in() says they held a lease back)."""
        try:
            row = conn.execute(self._sql.has_limits, (queue,)).fetchone()
        except psycopg.errors.UndefinedFunction:  # a schema before version 23
            return False
        return bool(row and row[0])

    def _lease_nothing_ahead(self, queue: str) -> None:
        """From now on the queue leases at most its free slots. Under limits across workers a
        job leased ahead would hold one of the queue's slots (its live lease counts as
        running) and its start in the rate window while it waits here without running."""
        with self._lock:
            if queue not in self._not_ahead:
                self._not_ahead.add(queue)
                self._room[queue] -= self.options.ahead(queue)
                self._refill[queue] = 1

    # -- shutdown --------------------------------------------------------------------------

    def _drain(self, conn: Connection, threads: list[threading.Thread]) -> Connection:
        """The shutdown: running handlers get the grace; the jobs still running after it are
        told to stop (job.lease_lost) and given back (release_jobs, attempt not charged).
        What the completer holds is settled, not given back: those handlers have returned."""
        waiting: list[Job] = []  # leased ahead, not started: given back at once
        for work in self._work.values():
            while True:
                try:
                    job = work.get_nowait()
                except queue_mod.Empty:
                    break
                if job is not None:
                    waiting.append(job)
        if waiting:
            try:
                if conn.closed or conn.broken:
                    conn = self._connect()
                conn.execute(self._sql.release_jobs, ([j.lease_token for j in waiting],))
            except psycopg.Error as e:
                log.error("could not give back %d job(s) leased ahead: %s; their leases will expire", len(waiting),
                          describe(e))
            for job in waiting:
                self._forget(job)
        with self._lock:
            completing = sum(held.handed_over for held in self._held.values())
            running = len(self._held) - completing
        log.info("stopping: no more leases; %d job(s) running, %d completing, %d not started given back, grace %.1fs",
                 running, completing, len(waiting), self.options.shutdown_grace)
        deadline = time.monotonic() + self.options.shutdown_grace
        with self._settled:
            while self._held and not self._hurry.is_set() and (left := deadline - time.monotonic()) > 0:
                self._settled.wait(min(left, 0.1))  # short waits: a second signal ends the grace
            rest = [held for held in self._held.values() if not held.handed_over]
            for held in rest:
                held.stopped = True
                held.job.lease_lost.set()
        if rest:
            tokens = [h.job.lease_token for h in rest]
            try:
                if conn.closed or conn.broken:
                    conn = self._connect()
                given = conn.execute(self._sql.release_jobs, (tokens,)).fetchone()
                log.warning("gave back %d job(s) still running after the grace (ids %s), attempts not charged",
                            given[0] if given else 0, ",".join(str(h.job.id) for h in rest))
            except psycopg.Error as e:
                log.error("could not give back %d job(s): %s; their leases will expire", len(rest), describe(e))
        for q, n in self.options.queues.items():
            for _ in range(n):
                self._work[q].put(None)
        deadline = time.monotonic() + SLOT_EXIT_WAIT_S
        for t in threads:
            if t.name != "oncely-renew":
                t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive() and t.name != "oncely-renew"]
        if stuck:
            log.warning("handler thread(s) %s did not return; their jobs were given back", ",".join(stuck))
        self._completer.close(FLUSH_WAIT_S)  # renewed until then: the renewal stops after it
        self._done.set()
        for t in threads:
            if t.name == "oncely-renew":
                t.join(5.0)
        return conn

    # -- handler threads -------------------------------------------------------------------

    def _slot(self, queue: str) -> None:
        conn: Connection | None = None  # opened for the first transactional handler
        while (job := self._work[queue].get()) is not None:
            registration = self._handlers.get(job.kind)
            if registration is None or not registration.transactional:  # an unknown kind has nothing to fence
                self._run_job_only(job, registration)
                continue
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect_slot(job)
                if conn is not None:
                    outcome, error = self._attempt(conn, job)
                    self._settle(conn, job, outcome, error)
            except psycopg.Error as e:
                log.error("queue=%s kind=%s id=%d attempt=%d: %s; its lease will expire and it will run again",
                          job.queue, job.kind, job.id, job.attempt, describe(e))
                if conn is not None and (conn.closed or conn.broken):
                    conn.close()
                    conn = None
            except BaseException:  # noqa: BLE001 - a slot must never die: log, free it, go on
                log.exception("queue=%s kind=%s id=%d: unexpected error in the worker", job.queue, job.kind, job.id)
            finally:
                self._forget(job)
        if conn is not None:
            conn.close()

    def _connect_slot(self, job: Job) -> Connection | None:
        try:
            return self._connect()
        except psycopg.OperationalError as e:
            log.error("queue=%s id=%d: cannot connect (%s); its lease will expire and it will run again",
                      job.queue, job.id, describe(e))
            self._stopping.wait(1.0)
            return None

    def _run_job_only(self, job: Job, registration: _Registration | None) -> None:
        """A job-only handler, run holding no connection. Its slot is free once it returns;
        its job stays held (its lease renewed) until the completer has settled it."""
        handed_over = False
        try:
            outcome, error = self._attempt_alone(job, registration)
            handed_over = self._hand_over(job, outcome, error)
        except BaseException:  # noqa: BLE001 - a slot must never die: log, free it, go on
            log.exception("queue=%s kind=%s id=%d: unexpected error in the worker", job.queue, job.kind, job.id)
        self._free_slot(job)
        if not handed_over:
            self._let_go(job)

    def _attempt_alone(self, job: Job, registration: _Registration | None) -> tuple[Outcome, BaseException | None]:
        """One attempt of a job-only handler: its outcome, and what it raised, if anything."""
        if (not_started := self._not_started(job)) is not None:
            return not_started
        error: BaseException | None = None
        try:
            with _tracing.running(self._trace(job)):
                job.output = self._call(job, registration, None)
        except BaseException as e:  # noqa: BLE001 - every failure becomes the job's outcome
            error = e
        return decide(error, stopping=self._stopped(job), lease_lost=job.lease_lost.is_set()), error

    def _hand_over(self, job: Job, outcome: Outcome, error: BaseException | None) -> bool:
        """Gives the job to the completer to settle; False when there is nothing to settle
        (the shutdown gave it back, or its lease is lost)."""
        with self._lock:
            held = self._held.get(job.lease_token)
            given_back = held is None or held.stopped
            if held is not None and not given_back and outcome.action is not Action.LOST:
                held.returned = held.handed_over = True  # the shutdown's release leaves it to the completer
        ref = f"queue={job.queue} kind={job.kind} id={job.id} attempt={job.attempt}"
        if given_back:  # whatever its handler did, the job runs again
            log.info("job released %s: given back at shutdown (%s)", ref, outcome.error or "its handler returned")
        elif outcome.action is Action.LOST:  # fail_job() would be refused: nothing to record
            log.warning("job lease lost %s: another attempt owns it (%s)", ref, outcome.error)
            if (spans := self._spans(job)) is not None:
                spans.finish("lease_stale", message=outcome.error or "the lease was lost")
        elif outcome.action is Action.COMPLETED:
            if (spans := self._spans(job)) is not None:
                spans.settling()
            self._completer.complete(job)
            return True
        else:
            self._completer.fail(job, outcome, error)
            return True
        return False

    def _not_started(self, job: Job) -> tuple[Outcome, BaseException] | None:
        """For a job leased ahead that is not to be started: its outcome, and why."""
        if self._stopping.is_set() or self._stopped(job):  # give it back
            error: BaseException = _NotStarted("given back at shutdown before it started")
            return decide(error, stopping=True), error
        if job.lease_lost.is_set():  # lost while it waited for a slot
            error = _NotStarted("its lease was lost before it started")
            return decide(error, lease_lost=True), error
        return None

    def _call(self, job: Job, registration: _Registration | None, tx: Connection | None) -> str | None:
        """Validates the payload and runs the handler: `fn(job, tx)`, or `fn(job)` without tx.
        Returns what it returned as the job's output, JSON text (None: none)."""
        if registration is None:
            raise UnknownKind(f"no handler for kind {job.kind!r} (this worker handles "
                              f"{', '.join(sorted(self._handlers))})")
        if registration.validate is not None:
            try:
                registration.validate(job.payload)
            except PermanentError:
                raise
            except Exception as e:
                raise InvalidPayload(f"invalid payload: {describe(e)}") from e
        if tx is None:
            return output_text(registration.fn(job))
        return output_text(registration.fn(job, tx))

    def _trace(self, job: Job) -> _tracing.Attempt | None:
        """Starts the attempt's spans, when opentelemetry is installed."""
        if not _tracing.ENABLED:
            return None
        spans = _tracing.attempt(job)
        with self._lock:
            held = self._held.get(job.lease_token)
            if held is not None:
                held.spans = spans
        return spans

    def _spans(self, job: Job) -> _tracing.Attempt | None:
        if not _tracing.ENABLED:
            return None
        with self._lock:
            held = self._held.get(job.lease_token)
            return None if held is None else held.spans

    def _reported(self, job: Job, completed: bool) -> None:
        """What complete_jobs() said of a job-only handler's job, for its spans."""
        if (spans := self._spans(job)) is None:
            return
        if completed:
            spans.finish("completed")
        else:
            spans.stale()
            spans.finish("lease_stale", message="the lease was lost before the completion")

    def _stopped(self, job: Job) -> bool:
        with self._lock:
            held = self._held.get(job.lease_token)
            return held is not None and held.stopped

    def _returned(self, job: Job) -> None:
        with self._lock:
            held = self._held.get(job.lease_token)
            if held is not None:
                held.returned = True

    def _attempt(self, conn: Connection, job: Job) -> tuple[Outcome, BaseException | None]:
        """One attempt: the handler's writes and complete_job() in one transaction. Returns
        the outcome and what was raised, if anything."""
        if (not_started := self._not_started(job)) is not None:
            return not_started
        error: BaseException | None = None
        spans = self._trace(job)
        try:
            with conn.transaction():
                with _tracing.running(spans):
                    output = self._call(job, self._handlers.get(job.kind), conn)
                self._returned(job)
                status = conn.info.transaction_status
                if status == psycopg.pq.TransactionStatus.INERROR:
                    raise RuntimeError("a statement of the handler failed and it went on: the transaction is aborted "
                                       "(let the error propagate, or run the statement in tx.transaction())")
                if status != psycopg.pq.TransactionStatus.INTRANS:
                    raise HandlerEndedTransaction("the handler ended the worker's transaction (COMMIT or ROLLBACK "
                                                  "through tx): its writes are not fenced by complete_job()")
                if spans is not None:
                    spans.settling()  # complete_job() and the commit
                conn.execute(self._sql.complete_job, (job.id, job.lease_token, output))
        except BaseException as e:  # noqa: BLE001 - every failure becomes the job's outcome
            error = e
        self._returned(job)  # before fail_job() settles it
        return decide(error, stopping=self._stopped(job), lease_lost=job.lease_lost.is_set()), error

    def _settle(self, conn: Connection, job: Job, outcome: Outcome, error: BaseException | None) -> None:
        """Carries the outcome out (fail_job, release_jobs), logs it once, and ends the
        attempt's spans with it."""
        spans = self._spans(job)
        try:
            settled = self._carry_out(conn, job, outcome, error, spans)
        except psycopg.OperationalError:
            raise  # the connection: the completer tries again; else _let_go() ends the spans
        except BaseException as e:
            if spans is not None:
                spans.finish(None, message=describe(e))
            raise
        if spans is None:
            return
        if outcome.action in (Action.RETRY, Action.DEAD):
            spans.finish(settled, self._error_class(job, error), outcome.error)
        elif outcome.action is Action.LOST:
            spans.finish(settled, message=outcome.error or "the lease was lost")
        else:
            spans.finish(settled)

    def _error_class(self, job: Job, error: BaseException | None) -> str:
        """A failed attempt's class, as the C++ worker names it (error.type)."""
        if job.kind not in self._handlers or isinstance(error, UnknownKind):
            return "unknown_kind"
        if isinstance(error, PermanentError):
            return "permanent"
        if getattr(error, "sqlstate", None) == QUERY_CANCELED:
            return "timeout"
        return "retryable"

    def _carry_out(self, conn: Connection, job: Job, outcome: Outcome, error: BaseException | None,
                   spans: _tracing.Attempt | None) -> str | None:
        """_settle()'s SQL and log; returns the outcome for the spans (None: given back)."""
        ref = f"queue={job.queue} kind={job.kind} id={job.id} attempt={job.attempt}"
        if outcome.action is Action.COMPLETED:
            log.debug("job completed %s", ref)
            return "completed"
        if outcome.action is Action.LOST:
            log.warning("job lease lost %s: its writes rolled back, another attempt owns it (%s)", ref, outcome.error)
            if spans is not None and getattr(error, "sqlstate", None) == LEASE_LOST:
                spans.stale()  # the fenced complete_job() refused it
            return "lease_stale"
        if spans is not None:
            spans.settling()
        if outcome.action is Action.RELEASE:
            conn.execute(self._sql.release_jobs, ([job.lease_token],))
            log.info("job released %s: %s", ref, outcome.error or "given back")
            return "deduplicated" if getattr(error, "sqlstate", None) == ALREADY_PROCESSED else None
        retryable = outcome.action is Action.RETRY
        detail = {"exception": type(error).__qualname__ if error else "",
                  "stack": "".join(traceback.format_exception(error))[-MAX_STACK_CHARS:] if error else ""}
        try:
            result = conn.execute(self._sql.fail_job, (job.id, job.lease_token, outcome.error[:MAX_ERROR_CHARS],
                                                       retryable, outcome.retry_in, Jsonb(detail))).fetchone()
        except psycopg.Error as e:
            if e.sqlstate != LEASE_LOST:
                raise
            log.warning("job lease lost %s before its failure was recorded (%s)", ref, outcome.error)
            if spans is not None:
                spans.stale()
            return "lease_stale"
        if result and result[0] == "dead":
            log.error("job dead-lettered %s error=%s", ref, outcome.error)
            return "dead_lettered"
        log.warning("job failed, will retry %s error=%s", ref, outcome.error)
        return "retried"

    def _forget(self, job: Job) -> None:
        self._free_slot(job)
        self._let_go(job)

    def _free_slot(self, job: Job) -> None:
        with self._lock:
            self._room[job.queue] += 1
            self._freed.add(job.queue)
        self._wake(b"j")  # room for a job: the dispatcher may lease again

    def _let_go(self, job: Job) -> None:
        """The job is settled (or left to its lease's expiry): no longer held nor renewed."""
        with self._settled:
            held = self._held.pop(job.lease_token, None)
            self._settled.notify_all()
        if held is not None and held.spans is not None:
            held.spans.finish(None)  # ended already, unless it was left to its lease's expiry

    # -- renewal ---------------------------------------------------------------------------

    def _renew(self) -> None:
        """Every renew_interval: renew_leases() for every held lease; a lost one sets its
        job's lease_lost, so that a handler that checks it stops early."""
        conn: Connection | None = None
        while not self._done.wait(self.options.renew_interval):
            with self._lock:
                tokens = [t for t, h in self._held.items() if not h.stopped]
            if not tokens:
                continue
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                lost = [row[0] for row in conn.execute(self._sql.renew_leases, (tokens, self.options.lease))]
            except psycopg.Error as e:
                log.warning("lease renewal failed (%s); retrying", describe(e))
                if conn is not None and (conn.closed or conn.broken):
                    conn.close()
                    conn = None
                continue
            for token in lost:
                with self._lock:
                    held = self._held.get(token)
                # A job completed since the tokens were read is "lost" too (its row is gone):
                # only a handler still running has anything to stop.
                if held is None or held.returned:
                    continue
                if not held.job.lease_lost.is_set():
                    held.job.lease_lost.set()
                    if held.spans is not None:
                        held.spans.lease_lost("renewal")
                    log.warning("job lease lost queue=%s kind=%s id=%d attempt=%d: told its handler to stop",
                                held.job.queue, held.job.kind, held.job.id, held.job.attempt)
        if conn is not None:
            conn.close()


class HandlerEndedTransaction(Exception):
    """A handler sent COMMIT or ROLLBACK itself: the attempt fails (and retries), since what
    it wrote may have committed without the job's completion."""


class _NotStarted(Exception):
    """A job leased ahead was not started: the worker is stopping, or its lease was lost."""
