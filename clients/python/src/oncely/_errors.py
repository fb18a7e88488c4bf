"""The exceptions a handler raises to choose its job's outcome, and the library's own errors.

Shaped by what the caller should do: `PermanentError` dead-letters the job now, `RetryIn`
retries it after a delay the handler chooses, any other exception retries it after the
queue's backoff (until its attempts are used up). `ConfigError` means: fix the program.
"""

from __future__ import annotations

import math


class OncelyError(Exception):
    """The base of the library's own errors."""


class ConfigError(OncelyError, ValueError):
    """An option, a handler registration or a queue's policy is wrong: fix the program."""


class PermanentError(Exception):
    """Raised by a handler: this job can never succeed (bad input, a refused request).

    The job becomes a dead letter of class `permanent` at once; no retry is spent on it.
    """


class InvalidPayload(PermanentError):
    """The job's payload is not what its handler accepts (raised by a `validate` callable or
    by the handler itself): a dead letter, never a silent drop."""


class UnknownKind(PermanentError):
    """No handler is registered for the job's kind: a dead letter, never a silent drop."""


class RetryIn(Exception):
    """Raised by a handler: retry this job after `seconds` (a Retry-After), not after the
    queue's backoff. The attempt still counts: a job that has used its last attempt becomes a
    dead letter of class `exhausted`."""

    def __init__(self, seconds: float, reason: str = "retry requested") -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise TypeError(f"RetryIn: seconds must be a finite number, not {seconds!r}")
        if not 0 <= seconds <= 30 * 86400:
            raise ValueError(f"RetryIn: seconds must be 0..2592000 (30 days), not {seconds}")
        super().__init__(reason)
        self.seconds = float(seconds)
        self.reason = reason
