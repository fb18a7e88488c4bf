"""The Python client (clients/python) as a conformance implementation: python_worker.py on
`oncely.Worker`, importing the package from the source tree (PYTHONPATH, no install)."""

from __future__ import annotations

import sys

from harness import HERE, Database, ProtocolWorker

CLIENT_SRC = HERE.parent.parent / "clients" / "python" / "src"


class PythonClient(ProtocolWorker):
    """Its queues' policies are set with `oncely queue set`, as for the SQL-only worker. It is
    ready once it has connected (the harness's default): run() installs its SIGTERM handler
    before it connects."""

    title = "Python client (clients/python)"

    def argv(self, db: Database, name: str) -> list[str]:
        # env(1) execs the interpreter: the worker's pid is still the one the harness signals.
        return ["/usr/bin/env", f"PYTHONPATH={CLIENT_SRC}", sys.executable, str(HERE / "python_worker.py"),
                "--queues", ",".join(self.policies), "--poll", "0.1", "--grace", "2"]
