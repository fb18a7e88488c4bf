#!/usr/bin/env python3
"""A minimal oncely worker that uses nothing but the SQL worker protocol (docs/protocol.md).

It is the conformance suite's "any language" implementation: a loop any team could write in
an afternoon, with psycopg 3 and the five functions. It leases jobs, runs each handler in a
transaction that ends with complete_job(), renews the leases it holds, reports failures with
fail_job() and gives its jobs back with release_jobs() on SIGTERM.

    DATABASE_URL=... ONCELY_SCHEMA=oncely sql_worker.py --queues default,other --name w1

The handlers are the conformance kinds (tests/conformance/README.md): credit, fail, poison,
and noop for the benchmark (bench/sql_worker.sh).
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import select
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

LEASE_LOST = "OC101"
ALREADY_PROCESSED = "OC102"
RENEW_EVERY_S = 1.0  # the shortest lease is 3 s

log = logging.getLogger("sql_worker")


class Stopped(Exception):
    """The handler stopped early: its lease is lost or the worker is shutting down."""


@dataclass
class Job:
    id: int
    kind: str
    payload: Any
    key: str
    attempt: int
    lease_token: int
    cancel: threading.Event = field(default_factory=threading.Event)


class Worker:
    def __init__(self, dsn: str, schema: str, queues: list[str], name: str, concurrency: int) -> None:
        self.dsn, self.schema, self.queues, self.name = dsn, schema, queues, name
        self.concurrency = concurrency
        self.stopping = threading.Event()
        self.held: dict[int, Job] = {}  # by lease token
        self.held_lock = threading.Lock()
        self.work: queue.Queue[Job | None] = queue.Queue()
        self.wake_r, self.wake_w = os.pipe()  # signals and freed slots wake the main loop
        os.set_blocking(self.wake_w, False)
        self.handlers: dict[str, Callable[[Job, psycopg.Connection[Any]], None]] = {
            "credit": self.credit, "fail": self.fail, "poison": self.poison, "noop": lambda job, conn: None}

    def fn(self, name: str) -> sql.Composable:
        return sql.Identifier(self.schema, name)

    # -- the handlers: their writes go through `conn`, inside the completing transaction --

    def credit(self, job: Job, conn: psycopg.Connection[Any]) -> None:
        p = job.payload
        if p.get("record"):
            with psycopg.connect(self.dsn, autocommit=True) as own:
                own.execute(sql.SQL("INSERT INTO {} (key, attempt, worker, pid) VALUES (%s, %s, %s, %s)")
                            .format(self.fn("conformance_starts")), (job.key, job.attempt, self.name, os.getpid()))
        if job.cancel.wait(p.get("sleep_ms", 0) / 1000):
            raise Stopped("stopped (lease lost or shutdown)")
        conn.execute(sql.SQL("INSERT INTO {} (key, account, cents, worker, attempt) VALUES (%s, %s, %s, %s, %s)")
                     .format(self.fn("conformance_effects")),
                     (job.key, p["account"], p["cents"], self.name, job.attempt))

    def fail(self, job: Job, conn: psycopg.Connection[Any]) -> None:
        raise RuntimeError("conformance: this job always fails")

    def poison(self, job: Job, conn: psycopg.Connection[Any]) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    # -- the protocol --

    def run_one(self, conn: psycopg.Connection[Any], job: Job) -> None:
        try:
            with conn.transaction():
                handler = self.handlers.get(job.kind)
                if handler is None:
                    raise ValueError(f"unknown kind {job.kind!r}")
                handler(job, conn)
                conn.execute(sql.SQL("SELECT {}(%s, %s)").format(self.fn("complete_job")), (job.id, job.lease_token))
        except Stopped:
            if self.stopping.is_set():
                self.release([job.lease_token], conn)
            else:
                log.warning("job %d: lease lost, stopped", job.id)
        except psycopg.Error as e:
            if e.sqlstate == LEASE_LOST:
                log.warning("job %d: lease lost (OC101), its writes rolled back", job.id)
            elif e.sqlstate == ALREADY_PROCESSED:
                self.release([job.lease_token], conn)  # the next lease deletes the duplicate
            else:
                self.fail_job(conn, job, e, retryable=True)
        except Exception as e:  # noqa: BLE001 - any handler error is the job's failure
            self.fail_job(conn, job, e, retryable=not isinstance(e, ValueError))
        finally:
            self.forget(job)

    def forget(self, job: Job) -> None:
        with self.held_lock:
            self.held.pop(job.lease_token, None)
        os.write(self.wake_w, b"j")  # a slot is free: the main loop may lease again

    def fail_job(self, conn: psycopg.Connection[Any], job: Job, error: Exception, retryable: bool) -> None:
        try:
            conn.execute(sql.SQL("SELECT {}(%s, %s, %s, %s)").format(self.fn("fail_job")),
                         (job.id, job.lease_token, f"{type(error).__name__}: {error}", retryable))
        except psycopg.Error as e:
            if e.sqlstate != LEASE_LOST:
                raise
            log.warning("job %d: lease lost before its failure was recorded", job.id)

    def release(self, tokens: list[int], conn: psycopg.Connection[Any]) -> None:
        if tokens:
            conn.execute(sql.SQL("SELECT {}(%s::bigint[])").format(self.fn("release_jobs")), (tokens,))

    def handler_thread(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while (job := self.work.get()) is not None:
                if self.stopping.is_set():
                    self.release([job.lease_token], conn)
                    self.forget(job)
                else:
                    self.run_one(conn, job)

    def renewal_thread(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopping.wait(RENEW_EVERY_S):
                with self.held_lock:
                    tokens = list(self.held)
                if not tokens:
                    continue
                lost = conn.execute(sql.SQL("SELECT * FROM {}(%s::bigint[])").format(self.fn("renew_leases")),
                                    (tokens,)).fetchall()
                for (token,) in lost:
                    with self.held_lock:
                        job = self.held.get(token)
                    if job is not None:
                        job.cancel.set()

    def lease(self, conn: psycopg.Connection[Any], queue_name: str, max_jobs: int) -> int:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(sql.SQL("SELECT * FROM {}(%s, %s, NULL, %s)").format(self.fn("lease_jobs")),
                               (queue_name, max_jobs, self.name)).fetchall()
        for r in rows:
            job = Job(r["id"], r["kind"], r["payload"], r["idempotency_key"], r["attempt"], r["lease_token"])
            with self.held_lock:
                self.held[job.lease_token] = job
            self.work.put(job)
        return len(rows)

    def run(self, poll_s: float) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        threads = [threading.Thread(target=self.handler_thread) for _ in range(self.concurrency)]
        threads.append(threading.Thread(target=self.renewal_thread))
        for t in threads:
            t.start()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.schema + ".jobs")))
            while not self.stopping.is_set():
                leased_full = False
                for q in self.queues:
                    with self.held_lock:
                        room = min(self.concurrency * 2 - len(self.held), 1000)
                    if room > 0:
                        leased_full |= self.lease(conn, q, room) == room
                if leased_full:
                    continue
                # Idle or full: wait for a NOTIFY (any payload wakes us), a freed slot, a
                # signal, or the poll.
                ready, _, _ = select.select([conn.fileno(), self.wake_r], [], [], poll_s)
                if self.wake_r in ready:
                    os.read(self.wake_r, 4096)
                if conn.fileno() in ready:
                    conn.execute("SELECT 1")  # reads the notifications
            log.info("stopping: releasing the jobs held")
            with self.held_lock:
                for job in self.held.values():
                    job.cancel.set()
            for _ in range(self.concurrency):
                self.work.put(None)
            for t in threads:
                t.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", default="default")
    parser.add_argument("--name", default=f"sql_worker-{os.getpid()}")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between polls when idle")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    worker = Worker(os.environ["DATABASE_URL"], os.environ.get("ONCELY_SCHEMA", "oncely"),
                    args.queues.split(","), args.name, args.concurrency)
    worker.run(args.poll)


if __name__ == "__main__":
    main()
