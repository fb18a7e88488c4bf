#!/usr/bin/env python3
"""The conformance suite's worker for the Python client (clients/python): the conformance
kinds credit, fail and poison (+ noop for benchmarks), as in sql_worker.py, on `oncely.Worker`.

    PYTHONPATH=clients/python/src DATABASE_URL=... ONCELY_SCHEMA=conf_1 CONFORMANCE_WORKER=w1 \
        python_worker.py --queues default,other --poll 0.1 --grace 2
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
from typing import Any

import psycopg
from psycopg import sql

import oncely


class Stopped(Exception):
    """The handler stopped early: its lease is lost or the worker is shutting down."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", default="default")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between polls when idle")
    parser.add_argument("--grace", type=float, default=2.0, help="the shutdown grace, in seconds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(threadName)s %(message)s")
    dsn, schema = os.environ["DATABASE_URL"], os.environ.get("ONCELY_SCHEMA", "oncely")
    name = os.environ.get("CONFORMANCE_WORKER", f"python-{os.getpid()}")
    worker = oncely.Worker(dsn, {q: args.concurrency for q in args.queues.split(",")}, schema=schema, name=name,
                           poll_interval=args.poll, shutdown_grace=args.grace)

    def table(name: str) -> sql.Composable:
        return sql.Identifier(schema, name)

    @worker.handler("credit")
    def credit(job: oncely.Job, tx: psycopg.Connection[Any]) -> None:
        p = job.payload
        if p.get("record"):  # its start, on a connection of its own: it stays whatever happens
            with psycopg.connect(dsn, autocommit=True) as own:
                own.execute(sql.SQL("INSERT INTO {} (key, attempt, worker, pid) VALUES (%s, %s, %s, %s)")
                            .format(table("conformance_starts")), (job.key, job.attempt, name, os.getpid()))
        if job.lease_lost.wait(p.get("sleep_ms", 0) / 1000):
            raise Stopped("stopped (lease lost or shutdown)")
        tx.execute(sql.SQL("INSERT INTO {} (key, account, cents, worker, attempt) VALUES (%s, %s, %s, %s, %s)")
                   .format(table("conformance_effects")), (job.key, p["account"], p["cents"], name, job.attempt))

    # No writes to fence: job-only handlers (completed in batches), so that the matrix runs
    # both of the client's paths; `credit` takes the transaction.
    @worker.handler("fail")
    def fail(job: oncely.Job) -> None:
        raise RuntimeError("conformance: this job always fails")

    @worker.handler("poison")
    def poison(job: oncely.Job) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    @worker.handler("noop")
    def noop(job: oncely.Job) -> None:
        pass

    worker.run()


if __name__ == "__main__":
    main()
