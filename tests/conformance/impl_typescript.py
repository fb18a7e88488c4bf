"""The TypeScript client (clients/typescript) as a conformance implementation: ts_worker.mjs,
the client built by ctest's typescript_setup fixture (ONCELY_TS_CLIENT names the build)."""

from __future__ import annotations

from pathlib import Path

from harness import HERE, Database, Implementation, Policy, WorkerProcess, env_path


class TypeScriptClient(Implementation):
    """tests/conformance/ts_worker.mjs: the `oncely` npm package's Worker with the conformance kinds."""

    title = "TypeScript client (clients/typescript)"

    def configure(self, db: Database, policies: dict[str, Policy], workdir: Path) -> None:
        super().configure(db, policies, workdir)
        for queue, p in policies.items():  # no C++ worker writes them: `oncely queue set` does
            db.cli("queue", "set", queue, "mode=lease", f"lease={p.lease}", f"max_attempts={p.max_attempts}",
                   f"backoff.base={p.backoff_base}", f"backoff.cap={p.backoff_cap}",
                   f"backoff.jitter={p.backoff_jitter}", f"job_timeout={p.job_timeout}")

    def ready(self, db: Database, worker: WorkerProcess, name: str) -> bool:
        """The client names its pool's connections "oncely <name>" (over PGAPPNAME)."""
        return bool(db.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (f"oncely {name}",)))

    def argv(self, db: Database, name: str) -> list[str]:
        return ["node", str(HERE / "ts_worker.mjs"), env_path("ONCELY_TS_CLIENT"),
                "--queues", ",".join(self.policies), "--poll-ms", "100"]
