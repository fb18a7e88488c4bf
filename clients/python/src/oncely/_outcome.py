"""What happens to a job after its handler ran: one pure function, `decide()`, maps the
attempt's result to exactly one action. The worker carries the action out; tests read the
table without a database."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._errors import PermanentError, RetryIn

LEASE_LOST = "OC101"  # complete_job/fail_job: the lease is not ours any more
ALREADY_PROCESSED = "OC102"  # complete_job: another copy of the key completed first
OUTPUT_REFUSED = "54000"  # complete_job: the output is over 64 KiB (or another limit that a retry meets again)


class Action(enum.Enum):
    COMPLETED = "completed"  # the handler's writes and complete_job() committed together
    RETRY = "retry"  # fail_job(retryable => true [, retry_in])
    DEAD = "dead"  # fail_job(retryable => false): a dead letter of class permanent
    LOST = "lost"  # OC101: nothing to do, the writes rolled back; another attempt owns the job
    RELEASE = "release"  # release_jobs(): a duplicate (OC102) or a job stopped by shutdown


@dataclass(frozen=True)
class Outcome:
    action: Action
    error: str = ""  # for fail_job() and the log
    retry_in: float | None = None  # seconds (RetryIn); None: the queue's backoff


def describe(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def decide(error: BaseException | None, *, stopping: bool = False, lease_lost: bool = False) -> Outcome:
    """The outcome of one attempt. `error` is what the handler or complete_job() raised
    (None: it committed); `stopping`: the worker is shutting down and set the job's
    `lease_lost`; `lease_lost`: the renewal found the lease lost."""
    if error is None:
        return Outcome(Action.COMPLETED)
    state = getattr(error, "sqlstate", None)
    if state == LEASE_LOST:
        return Outcome(Action.LOST, describe(error))
    if state == ALREADY_PROCESSED:
        return Outcome(Action.RELEASE, describe(error))
    if stopping:  # whatever it raised, it was told to stop: give the job back uncharged
        return Outcome(Action.RELEASE, describe(error))
    if lease_lost:  # another worker may be running it now; fail_job() would be refused
        return Outcome(Action.LOST, describe(error))
    if isinstance(error, PermanentError) or state == OUTPUT_REFUSED:
        return Outcome(Action.DEAD, describe(error))
    if isinstance(error, RetryIn):
        return Outcome(Action.RETRY, describe(error), retry_in=error.seconds)
    return Outcome(Action.RETRY, describe(error))
