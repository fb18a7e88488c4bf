"""The conformance suite's abstract worker: a database of one's own per scenario, worker
processes that can be started, killed, frozen and stopped, and the implementations under test.

A scenario talks only to `Implementation` (configure a queue's policy, start a worker) and to
`WorkerProcess` (kill -9, SIGSTOP/SIGCONT, SIGTERM); it reads the effects from the database.
Adding a worker in another language is one more `Implementation` (docs/conformance.md).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg
import pytest
from psycopg import sql

HERE = Path(__file__).resolve().parent


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Polls `condition` every 20 ms until it holds; fails naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)


def env_path(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set (ctest sets it; see tests/CMakeLists.txt)")
    return value


_schemas = itertools.count()


class Database:
    """A freshly migrated schema of its own, with the tables the conformance kinds write."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.schema = f"conf_{os.getpid()}_{next(_schemas)}"
        subprocess.run([env_path("ONCELY_BIN"), "migrate"], env=self.env(), check=True, capture_output=True)
        self.conn = psycopg.connect(url, autocommit=True)
        self.execute("""CREATE TABLE {s}.conformance_effects (
                          key text NOT NULL, account int NOT NULL, cents bigint NOT NULL,
                          worker text NOT NULL, attempt int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
                        CREATE TABLE {s}.conformance_starts (
                          key text NOT NULL, attempt int NOT NULL, worker text NOT NULL,
                          pid int NOT NULL, -- the process that runs the handler
                          at timestamptz NOT NULL DEFAULT clock_timestamp())""")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(DATABASE_URL=self.url, ONCELY_SCHEMA=self.schema, **extra)
        return env

    def _sql(self, query: str) -> sql.Composed:
        return sql.SQL(query.replace("{s}", "{schema}")).format(schema=sql.Identifier(self.schema))

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> None:
        self.conn.execute(self._sql(query), params)

    def scalar(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        row = self.conn.execute(self._sql(query), params).fetchone()
        return row[0] if row else None

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(self._sql(query), params).fetchall()

    def enqueue(self, kind: str, payload: dict[str, Any], key: str, queue: str = "default", **columns: Any) -> int:
        """A producer's plain INSERT (no dedup at enqueue: copies of a key are the worker's to settle);
        `columns`: more of the job's columns (depends_on, batch_id, max_attempts)."""
        names = ["queue", "kind", "payload", "idempotency_key", *columns]
        query = sql.SQL("INSERT INTO {table} ({names}) VALUES ({values}) RETURNING id").format(
            table=sql.Identifier(self.schema, "jobs"), names=sql.SQL(", ").join(map(sql.Identifier, names)),
            values=sql.SQL(", ").join(sql.Placeholder() * len(names)))
        row = self.conn.execute(query, (queue, kind, json.dumps(payload), key, *columns.values())).fetchone()
        assert row is not None
        return int(row[0])

    def count(self, table: str) -> int:
        return int(self.scalar("SELECT count(*) FROM {s}." + table))

    def cli(self, *args: str) -> str:
        done = subprocess.run([env_path("ONCELY_BIN"), *args], env=self.env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(f"oncely {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def drop(self) -> None:
        self.execute("DROP SCHEMA IF EXISTS {s} CASCADE")
        self.conn.close()


def database_for_a_test() -> Iterator[Database]:
    """A Database for one test, dropped after it: the body of the suites' `db` fixtures. Skips
    without ONCELY_TEST_DATABASE_URL, or fails when ONCELY_REQUIRE_PG says it must run."""
    url = os.environ.get("ONCELY_TEST_DATABASE_URL")
    if not url:
        if os.environ.get("ONCELY_REQUIRE_PG"):
            pytest.fail("ONCELY_TEST_DATABASE_URL is not set and ONCELY_REQUIRE_PG is")
        pytest.skip("ONCELY_TEST_DATABASE_URL is not set")
    database = Database(url)
    yield database
    database.drop()


class WorkerProcess:
    """One worker process in a session (process group) of its own."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL to the worker alone (its handlers' children see their parent die)."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def freeze(self, handler_pid: int) -> None:
        """SIGSTOP to the worker and to the handler running in it (an exec handler's
        process group is its own): nothing of it runs, renews or completes."""
        self.frozen = {self.proc.pid, os.getpgid(handler_pid)}
        for group in self.frozen:
            os.killpg(group, signal.SIGSTOP)

    def thaw(self) -> None:
        for group in self.frozen:
            try:
                os.killpg(group, signal.SIGCONT)
            except ProcessLookupError:
                pass  # the handler was ended meanwhile (its worker's supervisor, a timeout)

    def terminate(self, timeout_s: float = 20) -> int:
        """SIGTERM, then the exit code (a worker that does not exit in time fails the scenario)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker did not exit within {timeout_s}s of SIGTERM") from None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def cleanup(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


@dataclass(frozen=True)
class Policy:
    """A queue's policy, as each implementation is told it (and stores it in queue_policies)."""

    lease: str = "3s"
    max_attempts: int = 25
    backoff_base: str = "100ms"
    backoff_cap: str = "1s"
    backoff_jitter: str = "equal"
    job_timeout: str = "30s"
    # Limits across workers, as the configuration file writes them (none: no limits).
    limits: dict[str, Any] = field(default_factory=dict)
    # The C++ runtime's jobs per claim (its batch_size; none: its default, 500): a
    # transaction-mode thread runs the jobs of its claim one after the other.
    batch_size: int | None = None


class Implementation:
    """A worker implementation: how it learns a queue's policy and how one is started."""

    title = ""
    lease = True  # whether its jobs run under a lease (else in the claim's transaction)

    def __init__(self) -> None:
        self.policies: dict[str, Policy] = {}

    def configure(self, db: Database, policies: dict[str, Policy], workdir: Path) -> None:
        self.policies, self.workdir = policies, workdir

    def argv(self, db: Database, name: str) -> list[str]:
        raise NotImplementedError

    def start(self, db: Database, name: str) -> WorkerProcess:
        """Starts a worker and waits until it is ready (or has died): from then on it must
        handle SIGTERM, so that a scenario may stop it at any moment."""
        worker = WorkerProcess(self.argv(db, name), db.env(CONFORMANCE_WORKER=name, PGAPPNAME=name),
                               self.workdir / f"{name}.log")
        wait_until(lambda: not worker.alive() or self.ready(db, worker, name), 30, f"worker {name} to be ready")
        return worker

    def ready(self, db: Database, worker: WorkerProcess, name: str) -> bool:
        """Whether the worker has connected to the database (libpq and node-postgres name
        their connections after PGAPPNAME)."""
        return bool(db.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)))


def registered(db: Database, worker: WorkerProcess) -> bool:
    """A C++ worker is ready once it has registered (its row in `workers`)."""
    return bool(db.scalar("SELECT count(*) FROM {s}.workers WHERE pid = %s", (worker.proc.pid,)))


def cpp_queue_config(policy: Policy, mode: str) -> dict[str, Any]:
    queue: dict[str, Any] = {
        "mode": mode, "max_attempts": policy.max_attempts, "job_timeout": policy.job_timeout,
        "backoff": {"base": policy.backoff_base, "cap": policy.backoff_cap, "jitter": policy.backoff_jitter},
        "concurrency": 4, "poll_interval": "100ms"}
    if mode == "lease":
        queue["lease"] = policy.lease
    if policy.limits:
        queue["limits"] = policy.limits
    if policy.batch_size is not None:
        queue["batch_size"] = policy.batch_size
    return queue


class CppRuntime(Implementation):
    """The C++ runtime (tests/support/test_worker.cpp: C++ handlers), its policy from its file."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode, self.lease = mode, mode == "lease"
        self.title = f"C++ runtime, {mode} mode"

    def ready(self, db: Database, worker: WorkerProcess, name: str) -> bool:
        return registered(db, worker)

    def argv(self, db: Database, name: str) -> list[str]:
        config = {"shutdown_grace": "2s",
                  "queues": {q: cpp_queue_config(p, self.mode) for q, p in self.policies.items()}}
        return [env_path("ONCELY_TEST_WORKER"), json.dumps(config)]


# The exec handlers of CppExecHandler: shell scripts that complete their job themselves, with
# psql, in one transaction with their write (docs/protocol.md, handler-side completion).
EXEC_CREDIT = r"""
set -eu
payload=$(cat)
case "$payload" in *'"record":true'* | *'"record": true'*)
  psql "$APP_URL" -X -q -v ON_ERROR_STOP=1 -c "INSERT INTO \"$APP_SCHEMA\".conformance_starts (key, attempt, worker, pid)
    VALUES ('$ONCELY_IDEMPOTENCY_KEY', $ONCELY_ATTEMPT, '$WORKER_NAME', $$)" ;;
esac
ms=$(printf '%s' "$payload" | sed -n 's/.*"sleep_ms": *\([0-9]*\).*/\1/p')
sleep "$((${ms:-0} / 1000)).$(printf '%03d' $((${ms:-0} % 1000)))"
psql "$APP_URL" -X -q -v ON_ERROR_STOP=1 -v payload="$payload" <<SQL
BEGIN;
INSERT INTO "$APP_SCHEMA".conformance_effects (key, account, cents, worker, attempt)
  SELECT '$ONCELY_IDEMPOTENCY_KEY', (p->>'account')::int, (p->>'cents')::bigint, '$WORKER_NAME', $ONCELY_ATTEMPT
    FROM (SELECT :'payload'::jsonb AS p) AS job;
SELECT "$APP_SCHEMA".complete_job($ONCELY_JOB_ID, $ONCELY_LEASE_TOKEN);
COMMIT;
SQL
"""


class CppExecHandler(Implementation):
    """`oncely worker` on a lease queue whose exec handlers (shell and psql) complete their jobs."""

    title = "C++ runtime, exec handler (sh + psql) completing its job"

    def ready(self, db: Database, worker: WorkerProcess, name: str) -> bool:
        return registered(db, worker)

    def argv(self, db: Database, name: str) -> list[str]:
        config_file = self.workdir / f"{name}.json"
        env = {"APP_URL": db.url, "APP_SCHEMA": db.schema, "WORKER_NAME": name, "WORKER_CONFIG": str(config_file)}

        def handler(script: str) -> dict[str, Any]:
            return {"type": "exec", "env": env, "command": ["/bin/sh", "-c", script]}

        config = {"shutdown_grace": "2s",
                  "queues": {q: cpp_queue_config(p, "lease") for q, p in self.policies.items()},
                  "handlers": {"credit": handler(EXEC_CREDIT), "fail": handler("echo 'conformance: this job always fails' >&2; exit 1"),
                               # Kills the worker that runs it (its command line names this file).
                               "poison": handler('pkill -KILL -f -- "--config $WORKER_CONFIG"; sleep 5')}}
        config_file.write_text(json.dumps(config))
        return [env_path("ONCELY_BIN"), "worker", "--config", str(config_file)]


class ProtocolWorker(Implementation):
    """A worker on the SQL protocol alone: no C++ worker writes its queues' policies, so
    `oncely queue set` does."""

    def configure(self, db: Database, policies: dict[str, Policy], workdir: Path) -> None:
        super().configure(db, policies, workdir)
        for queue, p in policies.items():
            db.cli("queue", "set", queue, "mode=lease", f"lease={p.lease}", f"max_attempts={p.max_attempts}",
                   f"backoff.base={p.backoff_base}", f"backoff.cap={p.backoff_cap}",
                   f"backoff.jitter={p.backoff_jitter}", f"job_timeout={p.job_timeout}",
                   *(f"limits.{name}={value}" for name, value in p.limits.items()))


class SqlOnlyPython(ProtocolWorker):
    """tests/conformance/sql_worker.py: psycopg and the protocol's functions, nothing else."""

    title = "SQL protocol only (minimal Python loop)"

    def argv(self, db: Database, name: str) -> list[str]:
        return [sys.executable, str(HERE / "sql_worker.py"), "--queues", ",".join(self.policies), "--name", name,
                "--poll", "0.1"]


def implementations() -> list[Implementation]:
    """Every implementation the matrix runs, in its column order."""
    # (imported here: those modules import this one)
    from impl_python import PythonClient
    from impl_typescript import TypeScriptClient
    return [CppRuntime("transaction"), CppRuntime("lease"), CppExecHandler(), SqlOnlyPython(), PythonClient(),
            TypeScriptClient()]
