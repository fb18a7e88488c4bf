"""Every statement the library sends, named, in one place. Each calls one of the schema's
documented functions (docs/protocol.md); only the schema's name is substituted, quoted as an
identifier, once. Values are always parameters.

The statements are plain `str` with `%s` placeholders, so that `enqueue()` works on any
DB-API cursor of a psycopg connection (psycopg 3, Django's cursor wrapper, SQLAlchemy's
`exec_driver_sql`), not only on a psycopg 3 `Connection`.
"""

from __future__ import annotations

from dataclasses import dataclass


def quote_ident(name: str) -> str:
    """An SQL identifier, double-quoted (as PostgreSQL's quote_ident() would always do)."""
    if not name or "\x00" in name:
        raise ValueError(f"not a valid SQL identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Statements:
    """The worker's statements for one schema."""

    queue_policy: str
    lease_jobs: str
    limits_retry_in: str
    has_limits: str
    complete_job: str
    complete_jobs: str
    complete_jobs_with_outputs: str
    has_complete_jobs: str
    fail_job: str
    renew_leases: str
    release_jobs: str
    listen: str

    @classmethod
    def for_schema(cls, schema: str) -> Statements:
        s = quote_ident(schema)
        return cls(
            queue_policy=f"SELECT mode, extract(epoch FROM lease)::float8 FROM {s}.queue_policy(%s)",
            lease_jobs=(f"SELECT id, kind, payload, idempotency_key, attempt, lease_token, lease_expires_at, "
                        f"trace_context FROM {s}.lease_jobs(%s, %s, %s * interval '1 second', %s)"),
            # after a short lease: how long until the queue's limits may let one find room (version 23)
            limits_retry_in=f"SELECT extract(epoch FROM {s}.limits_retry_in(%s))::float8",
            # one row for a queue with limits across workers, none without (version 23)
            has_limits=f"SELECT count(*) > 0 FROM {s}.queue_limits_held(%s)",
            complete_job=f"SELECT {s}.complete_job(%s, %s, %s::jsonb)",
            # With outputs (schema version 27); without, any version from 20 on.
            complete_jobs=f"SELECT id FROM {s}.complete_jobs(%s::bigint[], %s::bigint[]) AS id",
            complete_jobs_with_outputs=f"SELECT id FROM {s}.complete_jobs(%s::bigint[], %s::bigint[], %s::text[]) AS id",
            # complete_jobs() is schema version 20's: job-only handlers need it
            has_complete_jobs=("SELECT EXISTS (SELECT FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                               "WHERE n.nspname = %s AND p.proname = 'complete_jobs')"),
            fail_job=(f"SELECT {s}.fail_job(%s, %s, %s, retryable => %s, retry_in => %s * interval '1 second', "
                      f"detail => %s::jsonb)"),
            renew_leases=f"SELECT lost FROM {s}.renew_leases(%s::bigint[], %s * interval '1 second') AS lost",
            release_jobs=f"SELECT {s}.release_jobs(%s::bigint[])",
            listen=f"LISTEN {quote_ident(schema + '.jobs')}",
        )


# enqueue()'s optional arguments: each is passed by name only when given, so that the SQL
# function's own defaults apply to the rest.
ENQUEUE_OPTIONAL = {
    "queue": "queue => %s",
    "key": "idempotency_key => %s",
    "run_at": "run_at => %s",
    "run_in": "run_at => now() + %s * interval '1 second'",  # the database owns the clock
    "priority": "priority => %s",
    "max_attempts": "max_attempts => %s",
    "unique_key": "unique_key => %s",
    "on_conflict": "on_conflict => %s",
    "depends_on": "depends_on => %s::bigint[]",  # these two: schema version 24
    "batch_id": "batch_id => %s::bigint",
    "traceparent": "traceparent => %s",  # schema version 26
}


def enqueue_statement(schema: str, given: list[str]) -> str:
    args = ["kind => %s", "payload => %s::jsonb"] + [ENQUEUE_OPTIONAL[name] for name in given]
    return f"SELECT {quote_ident(schema)}.enqueue({', '.join(args)})"


def open_batch_statement(schema: str) -> str:
    return f"SELECT {quote_ident(schema)}.open_batch(%s::jsonb, %s::jsonb, %s::jsonb)"


def close_batch_statement(schema: str) -> str:
    return f"SELECT {quote_ident(schema)}.close_batch(%s::bigint)"
