"""enqueue()'s argument checks and the statement it sends, without a database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from oncely import ConfigError, close_batch, enqueue, open_batch
from oncely._enqueue import enqueue_arguments
from oncely._sql import Statements, enqueue_statement, quote_ident


class Recorder:
    """A cursor that records what it is asked to run and returns job id 7 (or raises `error`)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, list[Any]]] = []
        self.error = error

    def execute(self, query: str, params: tuple[Any, ...]) -> None:
        self.calls.append((query, list(params)))
        if self.error is not None:
            raise self.error

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


def test_parents_and_a_batch() -> None:
    given, params = enqueue_arguments("k", {}, depends_on=(3, 2**63 - 1), batch_id=5)
    assert given == ["queue", "depends_on", "batch_id"]
    assert params == ["k", "{}", "default", [3, 2**63 - 1], 5]
    assert enqueue_statement("oncely", given).endswith("depends_on => %s::bigint[], batch_id => %s::bigint)")
    # no parents: no argument (a schema before version 24 has none)
    assert enqueue_arguments("k", {}, depends_on=[], unique_key="u") == (["queue", "unique_key"],
                                                                          ["k", "{}", "default", "u"])


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
    ({"depends_on": 5}, TypeError),
    ({"depends_on": "12"}, TypeError),
    ({"depends_on": [1, 0]}, ValueError),
    ({"depends_on": [1, "2"]}, ValueError),
    ({"depends_on": [True]}, ValueError),
    ({"depends_on": [2**63]}, ValueError),
    ({"depends_on": range(1, 10002)}, ValueError),  # more than 10,000 parents
    ({"batch_id": -1}, ValueError),
    ({"depends_on": [1], "unique_key": "u"}, ValueError),  # a unique job cannot wait
    ({"batch_id": 1, "unique_key": "u"}, ValueError),
])
def test_bad_arguments_fail_before_any_sql(kwargs: dict[str, Any], error: type[Exception]) -> None:
    args: dict[str, Any] = {"kind": "k", "payload": {}, **kwargs}
    with pytest.raises(error):
        enqueue_arguments(args.pop("kind"), args.pop("payload"), **args)


class SqlError(Exception):
    """What psycopg raises: an SQLSTATE, and the server's message in diag."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(f"ERROR: {message}")
        self.sqlstate = sqlstate
        self.diag = type("Diag", (), {"message_primary": message})()


class FrameworkError(Exception):
    """What a framework's cursor raises instead: psycopg's error is its cause."""


def wrapped(error: Exception) -> FrameworkError:
    try:
        raise FrameworkError("wrapped") from error
    except FrameworkError as e:
        return e


@pytest.mark.parametrize("error", [SqlError("23503", "job 9 does not exist"),
                                   wrapped(SqlError("23503", "job 9 does not exist"))])
def test_a_parent_or_batch_the_database_refuses_is_a_config_error(error: Exception) -> None:
    with pytest.raises(ConfigError, match="^enqueue: job 9 does not exist$"):
        enqueue(Recorder(error), "k", depends_on=[9])


def test_other_sql_errors_pass_through() -> None:
    error = SqlError("23503", "from a trigger of the caller's")
    with pytest.raises(SqlError):
        enqueue(Recorder(error), "k")  # no parents, no batch: not ours to interpret
    with pytest.raises(SqlError):
        enqueue(Recorder(SqlError("57014", "canceling statement")), "k", batch_id=1)


def test_batches() -> None:
    cursor = Recorder()
    assert open_batch(cursor, on_finish={"kind": "report", "payload": {"day": 1}}, schema="app") == 7
    close_batch(cursor, 7, schema="app")
    assert cursor.calls == [
        ('SELECT "app".open_batch(%s::jsonb, %s::jsonb, %s::jsonb)',
         [None, None, '{"kind": "report", "payload": {"day": 1}}']),
        ('SELECT "app".close_batch(%s::bigint)', [7])]
    with pytest.raises(ValueError, match="on_success is not JSON"):
        open_batch(cursor, on_success={"kind": "x", "payload": {"n": float("inf")}})
    with pytest.raises(ValueError, match="batch_id"):
        close_batch(cursor, 0)
    with pytest.raises(ConfigError, match='^open_batch: on_finish: "kind" must be a non-empty string$'):
        open_batch(Recorder(SqlError("22023", 'on_finish: "kind" must be a non-empty string')), on_finish={})
    with pytest.raises(ConfigError, match="^close_batch: batch 8 does not exist$"):
        close_batch(Recorder(SqlError("P0002", "close_batch: batch 8 does not exist")), 8)


def test_identifiers_are_quoted() -> None:
    assert quote_ident('we"ird') == '"we""ird"'
    assert Statements.for_schema("app").listen == 'LISTEN "app.jobs"'
    with pytest.raises(ValueError):
        quote_ident("")
