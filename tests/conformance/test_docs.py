"""docs/conformance.md's matrix names every scenario and every implementation of the suite."""

from __future__ import annotations

import inspect

import test_scenarios
from conftest import IMPLEMENTATIONS, scenario_title
from harness import HERE


def documented_matrix() -> list[list[str]]:
    """The matrix's rows, cells stripped, its delimiter row included (as "---" cells)."""
    text = (HERE.parent.parent / "docs" / "conformance.md").read_text()
    table = text.split("## The matrix", 1)[1].split("\n## ", 1)[0]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in table.splitlines() if line.startswith("|")]


def test_the_documented_matrix_has_every_row_and_column() -> None:
    head, delimiter, *rows = documented_matrix()
    assert head[1:] == [i.title for i in IMPLEMENTATIONS]
    assert delimiter == ["---"] * len(head)  # a short delimiter row is not a table in Markdown
    scenarios = [scenario_title(f) for name, f in inspect.getmembers(test_scenarios, inspect.isfunction)
                 if name.startswith("test_")]
    assert sorted(row[0] for row in rows) == sorted(scenarios)
    assert all(len(row) == len(head) for row in rows)
