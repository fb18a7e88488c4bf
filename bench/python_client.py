#!/usr/bin/env python3
"""The Python client's burn-down (docs/benchmarks.md): --jobs jobs preloaded in a lease queue
of a fresh schema, then --processes worker processes (oncely.Worker, --concurrency handler
threads each, every handler waiting --handler-ms) run them. --handler job-only (the default)
registers fn(job), completed in batches; --handler transactional registers fn(job, tx), a
commit per job. Measured as bench/peers/measure.mjs measures its peers: from the first
handler's start to no job left. Also reports the workers' CPU per job (from each one's first
job to its exit) and the most connections they held (pg_stat_activity, sampled every 5 ms).

    DATABASE_URL=postgresql://... ONCELY_BIN=build/src/oncely \
        /usr/bin/python3 bench/python_client.py --jobs 20000 --concurrency 24 [--processes 2] \
        [--handler-ms 10] [--handler job-only|transactional]

Prints one JSON line. Needs clients/python/src importable (it sets PYTHONPATH for its worker).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
APP = "oncely-bench-py"  # the worker's application_name: its connections are counted by it


def worker_main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))
    import oncely

    worker = oncely.Worker(os.environ["BENCH_DSN"], {"bench": args.concurrency}, schema=args.schema,
                           poll_interval=0.5, shutdown_grace=5, prefetch=args.prefetch)
    first = threading.Event()
    pause = args.handler_ms / 1000
    cpu_at_first = 0.0

    def noop(job: oncely.Job, tx: Any = None) -> None:
        nonlocal cpu_at_first
        if not first.is_set():
            first.set()
            cpu_at_first = time.process_time()
            print(f"first {time.time()}", flush=True)
        if pause:
            time.sleep(pause)

    worker.register("noop", noop, transaction=args.handler == "transactional")
    worker.run()
    # The process's CPU from its first job to the end of its shutdown (every thread's).
    print(f"cpu {time.process_time() - cpu_at_first}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--processes", type=int, default=1, help="worker processes, each of --concurrency")
    parser.add_argument("--prefetch", type=int, default=None, help="jobs leased ahead (default: the concurrency)")
    parser.add_argument("--handler-ms", type=float, default=0)
    parser.add_argument("--handler", choices=["job-only", "transactional"], default="job-only")
    parser.add_argument("--role", default="main")
    parser.add_argument("--schema", default=f"bench_py_{os.getpid()}")
    args = parser.parse_args()
    if args.role == "worker":
        worker_main(args)
        return
    url = os.environ["DATABASE_URL"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(ONCELY_SCHEMA=args.schema)
    oncely_bin = os.environ.get("ONCELY_BIN", str(ROOT / "build" / "src" / "oncely"))
    subprocess.run([oncely_bin, "migrate"], env=env, check=True, capture_output=True)
    subprocess.run([oncely_bin, "queue", "set", "bench", "mode=lease"], env=env, check=True, capture_output=True)
    db = psycopg.connect(url, autocommit=True)
    s = sql.Identifier(args.schema)
    try:
        db.execute(sql.SQL("INSERT INTO {}.jobs (queue, kind, payload) SELECT 'bench', 'noop', jsonb_build_object('id', i) "
                           "FROM generate_series(1, %s) AS i").format(s), (args.jobs,))
        db.execute(sql.SQL("ANALYZE {}.jobs").format(s))
        db.execute("CHECKPOINT")
        pending = sql.SQL("SELECT count(*) FROM {}.jobs").format(s)
        separator = "&" if "?" in url else "?"
        worker_env = dict(env, BENCH_DSN=f"{url}{separator}application_name={APP}")
        procs = [subprocess.Popen([sys.executable, __file__, "--role", "worker", "--schema", args.schema,
                                   "--concurrency", str(args.concurrency), "--handler-ms", str(args.handler_ms),
                                   "--handler", args.handler]
                                  + ([] if args.prefetch is None else ["--prefetch", str(args.prefetch)]),
                                  env=worker_env, stdout=subprocess.PIPE, text=True)
                 for _ in range(args.processes)]
        firsts: list[float] = []
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith("first "):
                raise RuntimeError(f"a worker did not start a job: {line!r}")
            firsts.append(float(line.split()[1]))
        start = min(firsts)
        peak = 0
        while True:
            left = db.execute(pending).fetchone()
            end = time.time()
            held = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APP,)).fetchone()
            peak = max(peak, held[0] if held else 0)
            if left and left[0] == 0:
                break
            if any(proc.poll() is not None for proc in procs):
                raise RuntimeError("a worker exited during the run")
            time.sleep(0.005)
        cpu_s = 0.0
        for proc in procs:
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
            cpu_s += sum(float(line.split()[1]) for line in out.splitlines() if line.startswith("cpu "))
        seconds = end - start
        print(json.dumps({"jobs": args.jobs, "processes": args.processes, "concurrency": args.concurrency, "prefetch": args.prefetch,
                          "handler": args.handler, "handler_ms": args.handler_ms,
                          "jobs_per_s": round(args.jobs / seconds, 1), "ms": round(seconds * 1000),
                          "worker_cpu_us_per_job": round(cpu_s * 1e6 / args.jobs), "most_connections": peak},
                         separators=(",", ":")))  # compact, as bench/common.sh's field() reads it
    finally:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
        db.close()


if __name__ == "__main__":
    main()
