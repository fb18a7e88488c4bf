#!/usr/bin/env python3
"""What a global concurrency limit costs a no-op lease burn-down, in interleaved rounds.

    DATABASE_URL=... PGDATA=/path/to/data python3 bench/limits_pairs.py ROUNDS NEW_BENCH [OLD_BENCH]

Each round runs, one after another: NEW_BENCH without limits (--metrics, as a limited run
serves its metrics too), NEW_BENCH with {"concurrency": 24} (the worker's concurrency), and
with OLD_BENCH the same two. It prints each run's jobs/s as a ratio to the round's first run,
and the medians. The VM's noise moves whole rounds; a ratio within a round holds better.

With PGDATA (a local server), each run's CPU per job too: the worker's own (the bench's
report) plus every PostgreSQL backend's, read from the postmaster's reaped children
(/proc/PID/stat cutime + cstime), so that CPU spent elsewhere on the machine does not count.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

LIMITS = '{"concurrency": 24}'


def postmaster_cpu_seconds(pgdata: str | None) -> float | None:
    if not pgdata:
        return None
    with open(os.path.join(pgdata, "postmaster.pid")) as pid_file:
        pid = int(pid_file.readline())
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime


def run(bench: str, args: list[str], jobs: int, pgdata: str | None) -> tuple[float, float | None]:
    before = postmaster_cpu_seconds(pgdata)
    out = subprocess.run(
        [bench, "process", "--jobs", str(jobs), "--runs", "1", "--mode", "lease", "--concurrency", "24", *args],
        capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    if before is None or pgdata is None:
        return report["jobs_per_s"], None
    time.sleep(0.3)  # the run's backends exit and are reaped
    after = postmaster_cpu_seconds(pgdata)
    assert after is not None
    server_us = (after - before) * 1e6 / jobs
    return report["jobs_per_s"], server_us + report["worker_cpu_us_per_job"]


def main() -> int:
    if len(sys.argv) not in (3, 4) or "DATABASE_URL" not in os.environ:
        print("usage: DATABASE_URL=... [PGDATA=...] bench/limits_pairs.py ROUNDS NEW_BENCH [OLD_BENCH]",
              file=sys.stderr)
        return 2
    rounds, new = int(sys.argv[1]), sys.argv[2]
    cells = {"new, no limits": (new, ["--metrics"]), "new, limited": (new, ["--limits", LIMITS])}
    if len(sys.argv) == 4:
        old = sys.argv[3]
        cells["old, limited"] = (old, ["--limits", LIMITS])
        cells["old, no limits"] = (old, [])  # an old bench may not know --metrics
    jobs = int(os.environ.get("JOBS", "20000"))
    pgdata = os.environ.get("PGDATA")
    rates: dict[str, list[float]] = {name: [] for name in cells}
    cpu: dict[str, list[float]] = {name: [] for name in cells}
    for r in range(1, rounds + 1):
        for name, (bench, args) in cells.items():
            rate, cpu_us = run(bench, args, jobs, pgdata)
            rates[name].append(rate)
            if cpu_us is not None:
                cpu[name].append(cpu_us)
        first = rates["new, no limits"][-1]
        print(f"round {r}: " + " · ".join(f"{name} {v[-1] / first:.2f}" for name, v in rates.items()), flush=True)
    print("\n| cell | median jobs/s | median ratio to new, no limits (same round) | CPU per job, whole run |")
    print("|---|---:|---:|---:|")
    for name, values in rates.items():
        ratios = [v / base for v, base in zip(values, rates["new, no limits"])]
        cpu_text = f"{statistics.median(cpu[name]):.0f} µs" if cpu[name] else "—"
        print(f"| {name} | {statistics.median(values):,.0f} | {statistics.median(ratios):.2f} | {cpu_text} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
