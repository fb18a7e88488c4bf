"""Enqueueing a job inside the caller's transaction, and the batches jobs may join."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from . import _tracing
from ._errors import ConfigError
from ._sql import close_batch_statement, enqueue_statement, open_batch_statement

ON_CONFLICT = ("skip", "replace", "error")
MAX_PARENTS = 10000  # the jobs_depends_on_size CHECK of schema version 24


class Executes(Protocol):
    """A psycopg 3 connection or cursor, or any DB-API cursor on one (Django's, SQLAlchemy's)."""

    def execute(self, query: Any, params: Any, /) -> Any: ...


def enqueue_arguments(kind: str, payload: Any, *, key: str | None = None, unique_key: str | None = None,
                      queue: str | None = "default", run_at: datetime | timedelta | None = None,
                      priority: int | None = None, max_attempts: int | None = None,
                      on_conflict: str | None = None, depends_on: Sequence[int] | None = None,
                      batch_id: int | None = None, traceparent: str | None = None) -> tuple[list[str], list[Any]]:
    """Checks the arguments of `enqueue()` (ValueError/TypeError, before any SQL) and returns
    the names of the optional arguments given and every parameter, in order (the traceparent,
    which enqueue() passes apart, is only checked). Pure."""
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
    if depends_on is not None:
        if isinstance(depends_on, (str, bytes)) or not isinstance(depends_on, Sequence):
            raise TypeError("enqueue: depends_on must be a sequence of job ids or None")
        if len(depends_on) > MAX_PARENTS:
            raise ValueError(f"enqueue: depends_on holds {len(depends_on)} job ids, more than {MAX_PARENTS}")
        if depends_on:  # none: no parents, and no argument that an older schema would not know
            give("depends_on", [job_id("enqueue: depends_on", parent) for parent in depends_on])
    if batch_id is not None:
        give("batch_id", job_id("enqueue: batch_id", batch_id))
    if traceparent is not None and not is_traceparent(traceparent):
        raise ValueError(f"enqueue: traceparent must be a W3C traceparent such as "
                         f"00-<32 hex>-<16 hex>-01, not {traceparent!r}")
    if unique_key is not None and ("depends_on" in given or "batch_id" in given):
        raise ValueError("enqueue: a job with a unique_key cannot have depends_on or a batch_id "
                         "(give it an idempotency key instead)")
    return given, params


_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-[!-~]*)?")


def is_traceparent(text: Any) -> bool:
    """Whether `text` is a traceparent the jobs table accepts (migration 0008's CHECK): version
    not ff, version 00 exactly 55 characters, trace and span ids not all zero, at most 512."""
    m = _TRACEPARENT.fullmatch(text) if isinstance(text, str) else None
    return (m is not None and m[1] != "ff" and (m[1] != "00" or len(text) == 55) and len(text) <= 512
            and int(m[2], 16) != 0 and int(m[3], 16) != 0)


def job_id(what: str, value: Any) -> int:
    """`value` if it is a job or batch id (a positive bigint); ValueError naming `what` if not."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**63 - 1:
        raise ValueError(f"{what}: not a positive integer id: {value!r}")
    return value


def enqueue(conn: Executes, kind: str, payload: Any = None, *, key: str | None = None,
            unique_key: str | None = None, queue: str = "default", run_at: datetime | timedelta | None = None,
            priority: int | None = None, max_attempts: int | None = None, on_conflict: str | None = None,
            depends_on: Sequence[int] | None = None, batch_id: int | None = None, traceparent: str | None = None,
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
    - `depends_on` (schema version 24): the ids of the jobs this one waits for; it is never
      leased before every one of them has completed, and it becomes a dead letter of class
      `dependency_failed` if one does not. At most 10,000; not with a `unique_key`.
    - `batch_id`: the open batch (`open_batch()`) this job is a member of.
    - `traceparent`: the producer's W3C trace context, stored with the job: its attempts run
      in child spans of it. With opentelemetry installed, it is the parent of enqueue()'s
      `send` span (else the current span is), and the job stores the send span's context
      instead. A job with a `unique_key` stores none (the live job it may hand back has a
      trace of its own).

    Raises ValueError/TypeError on bad arguments, before any SQL; ConfigError (a ValueError)
    when the database refuses a parent (no such job) or the batch (closed, or no such batch);
    psycopg's other errors as they come.
    """
    given, params = enqueue_arguments(kind, {} if payload is None else payload, key=key, unique_key=unique_key,
                                      queue=queue, run_at=run_at, priority=priority, max_attempts=max_attempts,
                                      on_conflict=on_conflict, depends_on=depends_on, batch_id=batch_id,
                                      traceparent=traceparent)
    refused = ("23503", "OC105", "22023") if "depends_on" in given or "batch_id" in given else ()

    def insert(trace_context: str | None) -> int:
        names, values = (given, params) if trace_context is None else ([*given, "traceparent"], [*params, trace_context])
        job = _fetch_one(conn, enqueue_statement(schema, names), values, "enqueue", refused)
        if job is None:
            raise RuntimeError("enqueue: the database returned no job id")
        return int(job)
    return _tracing.send(queue, kind, key, traceparent, insert)


def open_batch(conn: Executes, on_success: Mapping[str, Any] | None = None,
               on_failure: Mapping[str, Any] | None = None, on_finish: Mapping[str, Any] | None = None, *,
               schema: str = "oncely") -> int:
    """Opens a batch (`<schema>.open_batch()`, version 24) in the caller's transaction; returns its
    id, for its members' `enqueue(..., batch_id=)`. Close it with `close_batch()`.

    Each callback is a job description, `{"kind", "payload", "queue", "key", "priority",
    "max_attempts"}` (kind required), or None: when the batch is closed and its last member
    has completed or been dead-lettered, `on_success` is enqueued if none was dead-lettered,
    `on_failure` if one was, `on_finish` either way, once, with `batch_id`, `completed` and
    `dead` added to its payload.

    Raises ValueError for a callback that is not JSON; ConfigError for one the database
    refuses (not a job description).
    """
    descriptions: list[str | None] = []
    for name, description in (("on_success", on_success), ("on_failure", on_failure), ("on_finish", on_finish)):
        try:
            descriptions.append(None if description is None else json.dumps(description, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise ValueError(f"open_batch: {name} is not JSON: {e}") from e
    batch = _fetch_one(conn, open_batch_statement(schema), descriptions, "open_batch", ("22023",))
    if batch is None:
        raise RuntimeError("open_batch: the database returned no batch id")
    return int(batch)


def close_batch(conn: Executes, batch_id: int, *, schema: str = "oncely") -> None:
    """Closes a batch (`<schema>.close_batch()`) in the caller's transaction: no job may join it
    any more, and its callbacks are enqueued when its last member settles (at once if every
    member has). Closing a closed batch does nothing; ConfigError for one that does not exist."""
    batch = job_id("close_batch: batch_id", batch_id)
    _fetch_one(conn, close_batch_statement(schema), [batch], "close_batch", ("P0002",))


def _fetch_one(conn: Executes, query: str, params: list[Any], what: str, refused: tuple[str, ...]) -> Any:
    """The first column of the statement's one row. The SQLSTATEs in `refused` are the database
    refusing the caller's input: they become a ConfigError with its message."""
    try:
        result = conn.execute(query, tuple(params))
    except Exception as e:
        cause = e if hasattr(e, "sqlstate") else e.__cause__  # a framework's cursor wraps psycopg's error
        if getattr(cause, "sqlstate", None) in refused:
            message = getattr(getattr(cause, "diag", None), "message_primary", None) or str(cause)
            raise ConfigError(message if message.startswith(f"{what}:") else f"{what}: {message}") from e
        raise
    row = (conn if hasattr(conn, "fetchone") else result).fetchone()
    return None if row is None else row[0]
