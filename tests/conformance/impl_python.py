"""The Python client (clients/python) as a conformance implementation: python_worker.py on
`oncely.Worker`, importing the package from the source tree (PYTHONPATH, no install)."""

from __future__ import annotations

import sys
from pathlib import Path

from harness import HERE, Database, SqlOnlyPython, WorkerProcess

CLIENT_SRC = HERE.parent.parent / "clients" / "python" / "src"


class PythonClient(SqlOnlyPython):
    """Its queues' policies are set with `oncely queue set`, as for the SQL-only worker."""

    title = "Python client (clients/python)"

    def argv(self, db: Database, name: str) -> list[str]:
        return [sys.executable, str(HERE / "python_worker.py"), "--queues", ",".join(self.policies),
                "--poll", "0.1", "--grace", "2"]

    def start(self, db: Database, name: str) -> WorkerProcess:
        env = db.env(CONFORMANCE_WORKER=name, PYTHONPATH=str(CLIENT_SRC))
        return WorkerProcess(self.argv(db, name), env, Path(self.workdir) / f"{name}.log")
