"""The error -> outcome table (decide()), without a database."""

from __future__ import annotations

import pytest

from oncely import Action, InvalidPayload, PermanentError, RetryIn, UnknownKind, decide


class SqlError(Exception):
    """Stands in for a psycopg.Error: decide() reads only its sqlstate."""

    def __init__(self, sqlstate: str | None, message: str = "sql") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(("error", "stopping", "lease_lost", "action", "retry_in"), [
    (None, False, False, Action.COMPLETED, None),
    (None, True, True, Action.COMPLETED, None),  # it committed: nothing else matters
    (RuntimeError("boom"), False, False, Action.RETRY, None),
    (KeyError("id"), False, False, Action.RETRY, None),  # a bug a deploy fixes: retry
    (SystemExit(3), False, False, Action.RETRY, None),
    (PermanentError("refused"), False, False, Action.DEAD, None),
    (InvalidPayload("no email"), False, False, Action.DEAD, None),
    (UnknownKind("no handler"), False, False, Action.DEAD, None),
    (RetryIn(90), False, False, Action.RETRY, 90.0),
    (RetryIn(0), False, False, Action.RETRY, 0.0),
    (SqlError("OC101"), False, False, Action.LOST, None),
    (SqlError("OC101"), True, True, Action.LOST, None),
    (SqlError("OC102"), False, False, Action.RELEASE, None),
    (SqlError("54000"), False, False, Action.DEAD, None),  # complete_job() refused the output: a retry would too
    (SqlError("23505"), False, False, Action.RETRY, None),  # the handler's own SQL failed
    (SqlError(None), False, False, Action.RETRY, None),
    (RuntimeError("stopped"), True, True, Action.RELEASE, None),  # told to stop at shutdown
    (PermanentError("x"), True, True, Action.RELEASE, None),
    (RuntimeError("stopped"), False, True, Action.LOST, None),  # another worker has it now
    (PermanentError("x"), False, True, Action.LOST, None),
])
def test_decide(error: BaseException | None, stopping: bool, lease_lost: bool, action: Action,
                retry_in: float | None) -> None:
    outcome = decide(error, stopping=stopping, lease_lost=lease_lost)
    assert outcome.action is action
    assert outcome.retry_in == retry_in


def test_the_error_text_names_the_exception() -> None:
    assert decide(ValueError("bad cents")).error == "ValueError: bad cents"
    assert decide(ValueError()).error == "ValueError"


@pytest.mark.parametrize("seconds", [-1, 30 * 86400 + 1])
def test_retry_in_is_bounded_as_fail_job_bounds_it(seconds: float) -> None:
    with pytest.raises(ValueError):
        RetryIn(seconds)


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), True, "5"])
def test_retry_in_needs_a_number(seconds: object) -> None:
    with pytest.raises(TypeError):
        RetryIn(seconds)  # type: ignore[arg-type]
