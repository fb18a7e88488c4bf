"""Fixtures of the conformance suite, and the matrix it prints (scenario x implementation).

Run by ctest (`conformance`) with ONCELY_TEST_DATABASE_URL, ONCELY_BIN and ONCELY_TEST_WORKER
set; ONCELY_CONFORMANCE_MATRIX names the Markdown file the matrix is written to.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness import Database, Implementation, WorkerProcess, implementations, database_for_a_test

IMPLEMENTATIONS = implementations()
_results: dict[tuple[str, str], str] = {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "impl" in metafunc.fixturenames:
        metafunc.parametrize("impl", IMPLEMENTATIONS, ids=[i.title for i in IMPLEMENTATIONS])


@pytest.fixture
def db() -> Iterator[Database]:
    yield from database_for_a_test()


class Workers:
    """Starts an implementation's workers and kills whatever is left of them afterwards."""

    def __init__(self, impl: Implementation, db: Database) -> None:
        self.impl, self.db = impl, db
        self.started: list[WorkerProcess] = []

    def start(self, name: str) -> WorkerProcess:
        worker = self.impl.start(self.db, name)
        self.started.append(worker)
        return worker

    def logs(self) -> str:
        return "\n".join(f"--- {w.log_path.name}\n{w.output()[-4000:]}" for w in self.started)


@pytest.fixture
def workers(impl: Implementation, db: Database, request: pytest.FixtureRequest) -> Iterator[Workers]:
    w = Workers(impl, db)
    yield w
    for worker in w.started:
        worker.cleanup()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(w.logs())


@pytest.hookimpl(hookwrapper=True)  # type: ignore[misc]
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.when == "call":
        setattr(item, "rep_call", report)
    if not isinstance(item, pytest.Function) or item.function.__doc__ is None:
        return
    impl = item.callspec.params.get("impl") if hasattr(item, "callspec") else None
    if not isinstance(impl, Implementation):
        return
    cell = (scenario_title(item.function), impl.title)
    if report.failed:
        _results[cell] = "FAIL"
    elif report.skipped:
        _results.setdefault(cell, "skipped")
    elif report.when == "call":
        _results[cell] = "pass"


def scenario_title(function: Any) -> str:
    return str(function.__doc__).strip().splitlines()[0].rstrip(".")


def matrix(scenarios: list[str]) -> str:
    """The Markdown table of the results: one row per scenario, one column per implementation."""
    head = "| scenario | " + " | ".join(i.title for i in IMPLEMENTATIONS) + " |"
    rule = "|---|" + "---|" * len(IMPLEMENTATIONS)
    rows = [f"| {s} | " + " | ".join(_results.get((s, i.title), "not run") for i in IMPLEMENTATIONS) + " |"
            for s in scenarios]
    return "\n".join([head, rule, *rows]) + "\n"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    scenarios = list(dict.fromkeys(s for s, _ in _results))
    if not scenarios:
        return
    table = matrix(scenarios)
    terminalreporter.write_line("")
    terminalreporter.write_line("conformance matrix (docs/conformance.md):")
    for line in table.splitlines():
        terminalreporter.write_line(line)
    target = os.environ.get("ONCELY_CONFORMANCE_MATRIX")
    if target:
        Path(target).write_text(table)
