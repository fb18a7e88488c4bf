#!/usr/bin/env python3
"""One no-op burn-down by tests/conformance/sql_worker.py, measured as bench/peers/measure.mjs
measures graphile-worker and pg-boss (bench/sql_worker.sh runs it beside them):

    DATABASE_URL=... ONCELY_SCHEMA=s bench/sql_worker_burn.py --jobs 20000 --processes 2 --concurrency 8

The schema must be migrated, with its `default` queue a lease queue. Pre-inserts --jobs no-op
jobs, ANALYZE, CHECKPOINT; starts the worker processes; times from the first job done until
the database shows no job left. Prints one JSON object on stdout.

The start differs from measure.mjs's in one way: the SQL worker has no hook to report its
first handler start, so the clock starts when a poll (every 5 ms) first sees a job gone, at
most 5 ms and one round trip after that start: under 0.5 % of a run of a second or more.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

WORKER = Path(__file__).resolve().parent.parent / "tests" / "conformance" / "sql_worker.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--cap-s", type=float, default=300)
    args = parser.parse_args()
    url, schema = os.environ["DATABASE_URL"], os.environ["ONCELY_SCHEMA"]
    jobs_table = sql.Identifier(schema, "jobs")
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(sql.SQL("INSERT INTO {} (kind, payload) SELECT 'noop', jsonb_build_object('id', i) "
                           "FROM generate_series(1, %s) AS i").format(jobs_table), (args.jobs,))
        db.execute(sql.SQL("ANALYZE {}").format(jobs_table))
        db.execute("CHECKPOINT")  # the preload's dirty pages are not written during the run

        def pending() -> int:
            row = db.execute(sql.SQL("SELECT count(*) FROM {}").format(jobs_table)).fetchone()
            return int(row[0]) if row else -1

        if (before := pending()) != args.jobs:
            sys.exit(f"{before} jobs pending after the preload, expected {args.jobs}")

        spawned = time.monotonic()
        # One process per core is what Python's GIL allows; each runs --concurrency handler
        # threads with a connection each, one leasing connection and one renewing.
        workers = [subprocess.Popen([sys.executable, str(WORKER), "--queues", "default", "--name", f"bench-{i}",
                                     "--concurrency", str(args.concurrency)], stdout=subprocess.DEVNULL)
                   for i in range(args.processes)]

        def check() -> None:
            if any(w.poll() is not None for w in workers):
                sys.exit("a worker exited during the run")
            if time.monotonic() - spawned > args.cap_s:
                sys.exit(f"not done within {args.cap_s} s")

        try:
            while (left := pending()) == args.jobs:
                check()
                time.sleep(0.005)
            start = time.monotonic()
            # Coarse polls while most of the work is left (a count costs the server a scan),
            # then every 5 ms, as measure.mjs does after its workers report 90 % done.
            while left > 0:
                check()
                time.sleep(0.05 if left > args.jobs // 10 else 0.005)
                left = pending()
            end = time.monotonic()
        finally:
            for w in workers:
                w.send_signal(signal.SIGTERM)
            for w in workers:
                w.wait(timeout=30)
        dead = db.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "dead_letters"))).fetchone()
        if dead and dead[0]:
            sys.exit(f"{dead[0]} dead letters: the burn-down did not complete every job")
    ms = (end - start) * 1000
    result: dict[str, Any] = {"worker": "sql_worker.py", "jobs": args.jobs, "jobs_per_s": args.jobs / (ms / 1000),
                              "ms": ms, "startup_ms": (start - spawned) * 1000, "processes": args.processes,
                              "concurrency": args.concurrency}
    print(json.dumps(result, separators=(",", ":")))  # the form bench/common.sh's `field` reads


if __name__ == "__main__":
    main()
