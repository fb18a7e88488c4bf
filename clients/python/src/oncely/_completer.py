"""The completer: one thread with its own autocommit connection that settles the jobs of
job-only handlers once they have returned. Every completion waiting goes into one
complete_jobs() call (up to MAX_BATCH): one statement and one commit for the batch. There is
no timer: a call starts as soon as something waits, and while it commits, the next batch
gathers (group commit), so a quiet worker adds no latency and a busy one commits less often.
A failure or a give-back (fail_job(), release_jobs()) is one statement each, on the same
connection, so that job-only handlers never need a connection of their own.

complete_jobs() is fenced: a job whose lease is no longer ours is skipped, not an error. So a
batch whose call failed with the connection is simply sent again after a reconnect.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Callable

import psycopg

from ._handler import Connection
from ._job import Job
from ._outcome import Outcome, describe

log = logging.getLogger("oncely")

MAX_BATCH = 1000  # jobs per complete_jobs() call (it takes up to 10,000)
MAX_BACKOFF_S = 5.0  # between reconnections


class Completer:
    """Settles job-only handlers' jobs on one connection, opened when first needed.

    `settle(conn, job, outcome, error)` carries out an outcome other than completion;
    `settled(job)` is told once per job when it is settled, or left to its lease's expiry;
    `reported(job, completed)`, before it, what complete_jobs() said of a job: completed, or
    not (its lease was no longer ours)."""

    def __init__(self, connect: Callable[[], Connection], complete_jobs: str,
                 settle: Callable[[Connection, Job, Outcome, BaseException | None], None],
                 settled: Callable[[Job], None], *, reported: Callable[[Job, bool], None] | None = None,
                 complete_jobs_with_outputs: str | None = None) -> None:
        self._connect = connect
        self._complete_jobs = complete_jobs
        # A batch with outputs (schema version 27); one without runs on any version from 20.
        self._complete_jobs_with_outputs = complete_jobs_with_outputs
        self._settle = settle
        self._settled = settled
        self._reported = reported
        self._changed = threading.Condition()
        self._completed: list[Job] = []  # handlers returned: complete_jobs()
        self._failed: list[tuple[Job, Outcome, BaseException | None]] = []  # fail_job() or release_jobs()
        self._closing = False
        self._give_up_at = math.inf  # at shutdown: when to stop retrying an unreachable database
        self._thread = threading.Thread(target=self._run, name="oncely-complete", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def complete(self, job: Job) -> None:
        with self._changed:
            self._completed.append(job)
            self._changed.notify()

    def fail(self, job: Job, outcome: Outcome, error: BaseException | None) -> None:
        with self._changed:
            self._failed.append((job, outcome, error))
            self._changed.notify()

    def close(self, flush_wait: float) -> None:
        """Settles what waits, then stops the thread. If the database cannot be reached
        within `flush_wait` seconds, the jobs left are logged and their leases left to expire:
        they run again, never lost."""
        with self._changed:
            self._closing = True
            self._give_up_at = time.monotonic() + flush_wait
            self._changed.notify()
        self._thread.join(flush_wait + 1.0)  # + the last statement's own time
        if self._thread.is_alive():
            log.error("the completer did not finish within %.1fs; the jobs it holds will run again", flush_wait)

    def _next(self) -> tuple[list[tuple[Job, Outcome, BaseException | None]], list[Job]] | None:
        """What to settle now: every failure and up to MAX_BATCH completions, once anything
        waits; None once closing and nothing is left."""
        with self._changed:
            self._changed.wait_for(lambda: self._completed or self._failed or self._closing)
            if not (self._completed or self._failed):
                return None
            failed, self._failed = self._failed, []
            completed = self._completed[:MAX_BATCH]
            del self._completed[:MAX_BATCH]
            return failed, completed

    def _run(self) -> None:
        conn: Connection | None = None
        try:
            while (work := self._next()) is not None:
                conn = self._carry_out(conn, *work)
        except _GaveUp as e:
            with self._changed:
                left = [job for job, _, _ in self._failed] + self._completed
                self._failed, self._completed = [], []
            left += e.jobs
            log.error("could not settle %d job(s) at shutdown: the database is unreachable (%s); their leases will "
                      "expire and they will run again (ids %s)", len(left), e.reason, ",".join(str(j.id) for j in left))
            for job in left:
                self._settled(job)
        finally:
            if conn is not None:
                conn.close()

    def _carry_out(self, conn: Connection | None, failed: list[tuple[Job, Outcome, BaseException | None]],
                   completed: list[Job]) -> Connection | None:
        """Settles one batch, reconnecting and retrying it while the connection fails."""
        retries = 0
        while True:
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                while failed:  # popped once recorded: a retry does not repeat it
                    job, outcome, error = failed[0]
                    self._settle(conn, job, outcome, error)
                    failed.pop(0)
                    self._settled(job)
                if completed:
                    ids, tokens = [j.id for j in completed], [j.lease_token for j in completed]
                    outputs = [j.output for j in completed]
                    if self._complete_jobs_with_outputs is not None and any(o is not None for o in outputs):
                        rows = conn.execute(self._complete_jobs_with_outputs, (ids, tokens, outputs))
                    else:
                        rows = conn.execute(self._complete_jobs, (ids, tokens))
                    self._report(completed, {row[0] for row in rows}, retried=retries > 0)
                return conn
            except psycopg.OperationalError as e:
                retries += 1
                log.error("completer: database connection failed (%s); reconnecting to settle %d job(s)",
                          describe(e), len(failed) + len(completed))
                if conn is not None:
                    conn.close()
                    conn = None
                if not self._pause(min(0.1 * 2 ** retries, MAX_BACKOFF_S)):
                    raise _GaveUp([job for job, _, _ in failed] + completed, describe(e)) from e
            except Exception as e:  # noqa: BLE001 - not the connection: the same call would fail again
                left = [job for job, _, _ in failed] + completed
                log.error("completer: %s; %d job(s) not settled: their leases will expire and they will run again "
                          "(ids %s)", describe(e), len(left), ",".join(str(j.id) for j in left))
                for job in left:
                    self._settled(job)
                return conn

    def _report(self, batch: list[Job], completed: set[int], *, retried: bool) -> None:
        log.debug("completed %d of %d job(s) in one call", len(completed), len(batch))
        for job in batch:
            if job.id in completed:
                log.debug("job completed queue=%s kind=%s id=%d attempt=%d", job.queue, job.kind, job.id, job.attempt)
            else:
                log.warning("job lease lost queue=%s kind=%s id=%d attempt=%d: not completed, another attempt owns "
                            "it%s", job.queue, job.kind, job.id, job.attempt,
                            " (or the call that failed before this retry completed it)" if retried else "")
            if self._reported is not None:
                self._reported(job, job.id in completed)
            self._settled(job)

    def _pause(self, seconds: float) -> bool:
        """Waits before a retry; False once the shutdown's flush has no time left."""
        with self._changed:
            if not self._closing:
                self._changed.wait_for(lambda: self._closing, seconds)
                return True
            left = self._give_up_at - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(seconds, left))
        return True


class _GaveUp(Exception):
    def __init__(self, jobs: list[Job], reason: str) -> None:
        super().__init__(reason)
        self.jobs = jobs
        self.reason = reason
