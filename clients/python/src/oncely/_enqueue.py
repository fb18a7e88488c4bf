"""Enqueueing a job inside the caller's transaction."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from typing import Any, Protocol

from ._sql import enqueue_statement

ON_CONFLICT = ("skip", "replace", "error")


class Executes(Protocol):
    """A psycopg 3 connection or cursor, or any DB-API cursor on one (Django's, SQLAlchemy's)."""

    def execute(self, query: Any, params: Any, /) -> Any: ...


def enqueue_arguments(kind: str, payload: Any, *, key: str | None = None, unique_key: str | None = None,
                      queue: str | None = "default", run_at: datetime | timedelta | None = None,
                      priority: int | None = None, max_attempts: int | None = None,
                      on_conflict: str | None = None) -> tuple[list[str], list[Any]]:
    """Checks the arguments of `enqueue()` (ValueError/TypeError, before any SQL) and returns
    the names of the optional arguments given and every parameter, in order. Pure."""
    if not isinstance(kind, str) or not kind:
        raise ValueError("enqueue: kind must be a non-empty string")
    try:
        payload_json = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"enqueue: the payload is not JSON: {e}") from e
    given: list[str] = []
    params: list[Any] = [kind, payload_json]

    def give(name: str, value: Any) -> None:
        given.append(name)
        params.append(value)

    def give_text(name: str, value: str | None) -> None:
        if value is not None:
            if not isinstance(value, str) or not value:
                raise ValueError(f"enqueue: {name} must be a non-empty string or None")
            give(name, value)

    give_text("queue", queue)
    give_text("key", key)
    if isinstance(run_at, timedelta):
        seconds = run_at.total_seconds()
        if not math.isfinite(seconds):
            raise ValueError("enqueue: run_at must be finite")
        give("run_in", seconds)
    elif isinstance(run_at, datetime):
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise ValueError("enqueue: run_at must be timezone-aware (or a timedelta from the database's now())")
        give("run_at", run_at)
    elif run_at is not None:
        raise TypeError("enqueue: run_at must be a datetime, a timedelta or None")
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int) or not -32768 <= priority <= 32767:
            raise ValueError("enqueue: priority must be an integer in -32768..32767 (lower runs first)")
        give("priority", priority)
    if max_attempts is not None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError("enqueue: max_attempts must be a positive integer or None (the queue's policy)")
        give("max_attempts", max_attempts)
    give_text("unique_key", unique_key)
    if on_conflict is not None:
        if on_conflict not in ON_CONFLICT:
            raise ValueError(f"enqueue: on_conflict must be one of {', '.join(ON_CONFLICT)}, not {on_conflict!r}")
        if unique_key is None:
            raise ValueError("enqueue: on_conflict needs a unique_key")
        give("on_conflict", on_conflict)
    return given, params


def enqueue(conn: Executes, kind: str, payload: Any = None, *, key: str | None = None,
            unique_key: str | None = None, queue: str = "default", run_at: datetime | timedelta | None = None,
            priority: int | None = None, max_attempts: int | None = None, on_conflict: str | None = None,
            schema: str = "oncely") -> int:
    """Enqueues a job in the caller's transaction (`<schema>.enqueue()`); returns its id.

    The job exists only if the caller's transaction commits: enqueue it in the transaction
    that writes what it is about (an order and its receipt email), and it can never be sent
    for an order that rolled back. `conn` is a psycopg 3 connection or cursor, or a DB-API
    cursor on one; nothing here commits.

    - `payload`: any JSON value (None: `{}`).
    - `key`: the idempotency key. Every copy of a key has one effect: the first to complete
      leaves a marker, and later copies are deleted unrun.
    - `unique_key` (with `on_conflict`: `skip`, the default, returns the live job's id;
      `replace` replaces it while it waits; `error` raises a unique violation): at most one
      live job per (kind, unique_key).
    - `run_at`: an aware datetime, or a timedelta from the database's `now()`.
    - `priority`: lower runs first (default 0); `max_attempts`: overrides the queue's policy.

    Raises ValueError/TypeError on bad arguments, before any SQL; psycopg's errors as they come.
    """
    given, params = enqueue_arguments(kind, {} if payload is None else payload, key=key, unique_key=unique_key,
                                      queue=queue, run_at=run_at, priority=priority, max_attempts=max_attempts,
                                      on_conflict=on_conflict)
    result = conn.execute(enqueue_statement(schema, given), tuple(params))
    cursor = conn if hasattr(conn, "fetchone") else result
    row = cursor.fetchone()
    if row is None or row[0] is None:
        raise RuntimeError("enqueue: the database returned no job id")
    return int(row[0])
