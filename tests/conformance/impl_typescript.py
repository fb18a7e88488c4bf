"""The TypeScript client (clients/typescript) as a conformance implementation: ts_worker.mjs,
the client built by ctest's typescript_setup fixture (ONCELY_TS_CLIENT names the build)."""

from __future__ import annotations

from harness import HERE, Database, ProtocolWorker, WorkerProcess, env_path


class TypeScriptClient(ProtocolWorker):
    """tests/conformance/ts_worker.mjs: the `oncely` npm package's Worker with the conformance kinds."""

    title = "TypeScript client (clients/typescript)"

    def ready(self, db: Database, worker: WorkerProcess, name: str) -> bool:
        """The client names its pool's connections "oncely <name>" (over PGAPPNAME)."""
        return bool(db.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (f"oncely {name}",)))

    def argv(self, db: Database, name: str) -> list[str]:
        return ["node", str(HERE / "ts_worker.mjs"), env_path("ONCELY_TS_CLIENT"),
                "--queues", ",".join(self.policies), "--poll-ms", "100"]
