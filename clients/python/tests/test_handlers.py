"""Which handlers are transactional (fn(job, tx)) and which are job-only (fn(job)): the
signature rule and its explicit override, without a database."""

from __future__ import annotations

import functools
from typing import Any, Callable

import pytest

from oncely import ConfigError, Job, Worker
from oncely._handler import takes_transaction

DSN = "postgresql://user:secret@db.invalid/app"


def job_only(job: Job) -> None: ...
def with_tx(job: Job, tx: Any) -> None: ...
def tx_with_default(job: Job, tx: Any = None) -> None: ...
def tx_keyword_only(job: Job, *, tx: Any = None) -> None: ...
def job_with_default(job: Job | None = None) -> None: ...
def star_args(*args: Any) -> None: ...
def job_then_star_args(job: Job, *args: Any) -> None: ...
def positional_only(job: Job, /) -> None: ...
def prefixed(prefix: str, job: Job) -> None: ...
def prefixed_with_tx(prefix: str, job: Job, tx: Any) -> None: ...
def no_args() -> None: ...
def three_args(job: Job, tx: Any, extra: Any) -> None: ...
def only_kwargs(**kwargs: Any) -> None: ...


class Opaque:
    """A callable whose signature cannot be read, as some builtins' and C extensions'."""

    __signature__ = "unreadable"

    def __call__(self, *args: Any) -> None: ...


class Mailer:
    def send(self, job: Job) -> None: ...
    def record(self, job: Job, tx: Any) -> None: ...
    def __call__(self, job: Job) -> None: ...


@pytest.mark.parametrize(("fn", "transactional"), [
    (job_only, False),
    (with_tx, True),
    (tx_with_default, True),  # a second parameter that can be passed positionally gets tx
    (tx_keyword_only, False),  # keyword-only: never passed positionally
    (job_with_default, False),
    (star_args, True),
    (job_then_star_args, True),
    (positional_only, False),
    (lambda job: None, False),
    (lambda job, tx: None, True),
    (Mailer().send, False),  # bound: self is not counted
    (Mailer().record, True),
    (Mailer(), False),  # a callable object: its __call__
    (functools.partial(prefixed, "p"), False),
    (functools.partial(prefixed_with_tx, "p"), True),
    (len, False),  # a builtin with a signature: len(obj, /)
], ids=lambda v: getattr(v, "__qualname__", None) if callable(v) else None)
def test_the_signature_decides(fn: Callable[..., object], transactional: bool) -> None:
    assert takes_transaction("k", fn, None) is transactional


@pytest.mark.parametrize("fn", [no_args, three_args, only_kwargs])
def test_a_handler_that_takes_neither_shape_is_refused(fn: Callable[..., object]) -> None:
    with pytest.raises(ConfigError, match=r"must take \(job\) or \(job, tx\)"):
        takes_transaction("k", fn, None)


@pytest.mark.parametrize(("fn", "transaction", "transactional"), [
    (with_tx, True, True),
    (job_only, False, False),
    (tx_with_default, False, False),  # called as fn(job): tx keeps its default
    (star_args, False, False),
    (star_args, True, True),
    (Opaque(), True, True),  # no signature to read: the override is trusted
    (Opaque(), False, False),
])
def test_an_override_that_fits_the_signature_wins(fn: Callable[..., object], transaction: bool,
                                                  transactional: bool) -> None:
    assert takes_transaction("k", fn, transaction) is transactional


@pytest.mark.parametrize(("fn", "transaction", "message"), [
    (with_tx, False, r"transaction=False but cannot be called as fn\(job\)"),
    (prefixed, False, r"transaction=False but cannot be called as fn\(job\)"),
    (job_only, True, r"transaction=True but cannot be called as fn\(job, tx\)"),
    (tx_keyword_only, True, r"transaction=True but cannot be called as fn\(job, tx\)"),
    (no_args, False, r"transaction=False"),
    (Opaque(), None, "no signature to read"),
])
def test_an_override_that_does_not_fit_is_a_config_error(fn: Callable[..., object], transaction: bool | None,
                                                         message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        takes_transaction("k", fn, transaction)


def test_the_decorator_takes_the_override() -> None:
    worker = Worker(DSN, {"emails": 1})

    @worker.handler("send", transaction=False)
    def send(job: Job, tx: Any = None) -> None: ...

    with pytest.raises(ConfigError, match="transaction=True"):
        worker.register("mail", job_only, transaction=True)
    with pytest.raises(ConfigError, match="True, False or None"):
        worker.register("mail", job_only, transaction="yes")  # type: ignore[arg-type]
    worker.register("mail", job_only)  # refused registrations leave no trace
