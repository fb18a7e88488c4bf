"""enqueue()'s argument checks and the statement it sends, without a database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from oncely import enqueue
from oncely._enqueue import enqueue_arguments
from oncely._sql import Statements, enqueue_statement, quote_ident


class Recorder:
    """A cursor that records what it is asked to run and returns job id 7."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any]]] = []

    def execute(self, query: str, params: tuple[Any, ...]) -> None:
        self.calls.append((query, list(params)))

    def fetchone(self) -> tuple[int]:
        return (7,)


def test_only_the_given_arguments_are_passed_so_the_function_defaults_apply() -> None:
    cursor = Recorder()
    assert enqueue(cursor, "send_email", {"to": "a@example.com"}) == 7
    query, params = cursor.calls[0]
    assert query == 'SELECT "oncely".enqueue(kind => %s, payload => %s::jsonb, queue => %s)'
    assert params == ["send_email", '{"to": "a@example.com"}', "default"]


def test_every_argument() -> None:
    at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    given, params = enqueue_arguments("k", [1], key="k-1", unique_key="u", queue="q", run_at=at, priority=-5,
                                      max_attempts=3, on_conflict="replace")
    assert given == ["queue", "key", "run_at", "priority", "max_attempts", "unique_key", "on_conflict"]
    assert params == ["k", "[1]", "q", "k-1", at, -5, 3, "u", "replace"]
    assert enqueue_statement("my schema", given).startswith('SELECT "my schema".enqueue(kind => %s')


def test_a_timedelta_runs_from_the_databases_clock() -> None:
    given, params = enqueue_arguments("k", {}, run_at=timedelta(minutes=5))
    assert "run_in" in given and 300.0 in params
    assert "now() + %s * interval '1 second'" in enqueue_statement("oncely", given)


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"kind": ""}, ValueError),
    ({"payload": {"x": object()}}, ValueError),
    ({"payload": float("nan")}, ValueError),
    ({"key": ""}, ValueError),
    ({"unique_key": ""}, ValueError),
    ({"queue": ""}, ValueError),
    ({"run_at": datetime(2030, 1, 1)}, ValueError),  # naive: whose clock?
    ({"run_at": "tomorrow"}, TypeError),
    ({"priority": 40000}, ValueError),
    ({"priority": 1.5}, ValueError),
    ({"max_attempts": 0}, ValueError),
    ({"on_conflict": "overwrite", "unique_key": "u"}, ValueError),
    ({"on_conflict": "skip"}, ValueError),  # needs a unique_key
])
def test_bad_arguments_fail_before_any_sql(kwargs: dict[str, Any], error: type[Exception]) -> None:
    args: dict[str, Any] = {"kind": "k", "payload": {}, **kwargs}
    with pytest.raises(error):
        enqueue_arguments(args.pop("kind"), args.pop("payload"), **args)


def test_identifiers_are_quoted() -> None:
    assert quote_ident('we"ird') == '"we""ird"'
    assert Statements.for_schema("app").listen == 'LISTEN "app.jobs"'
    with pytest.raises(ValueError):
        quote_ident("")
