"""A leased job, as a handler sees it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(eq=False)
class Job:
    """One attempt of a job, leased by this worker.

    `lease_lost` is set when the renewal finds the lease lost (it expired and another worker
    took the job) or when the worker stops after its shutdown grace. A long handler should
    check it (`job.lease_lost.is_set()`, or wait on it instead of sleeping) and stop: its
    writes would be rolled back anyway, since `complete_job` refuses a lease that is not ours.
    """

    id: int
    kind: str
    queue: str
    payload: Any  # the job's JSON payload, decoded (usually a dict)
    key: str | None  # the idempotency key (its dedup marker's); None: the job is its own key
    attempt: int  # 1 for the first attempt
    lease_token: int
    lease_expires_at: datetime | None
    traceparent: str | None  # the producer's W3C trace context, as stored with the job
    lease_lost: threading.Event = field(default_factory=threading.Event, repr=False)
    output: str | None = field(default=None, repr=False)  # what the handler returned, as JSON text
