"""The two shapes of a handler, and the rule that tells them apart at registration (pure:
unit-tested without a database).

- `fn(job, tx)`, a *transactional* handler: it runs inside a transaction of its own, and its
  writes through `tx` commit with the job's completion (complete_job()).
- `fn(job)`, a *job-only* handler: it has no writes to fence (a no-op, a mail or a webhook
  sent with the job's key), so it runs holding no connection, and its job is completed in a
  batch with others (complete_jobs()): one commit for many jobs.

The rule: a handler that can be called with two positional arguments is transactional (a
second positional parameter, with or without a default, or `*args`); one that can be
called with one positional argument but not two is job-only. `transaction=True` or `False`
at registration says it instead, and must fit the signature.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Union

import psycopg

from ._errors import ConfigError
from ._job import Job

Connection = psycopg.Connection[Any]
TransactionalHandler = Callable[[Job, Connection], object]
JobHandler = Callable[[Job], object]
Handler = Union[TransactionalHandler, JobHandler]

_JOB, _TX = object(), object()  # stand-ins: only the number of positional arguments matters


def takes_transaction(kind: str, fn: Callable[..., object], transaction: bool | None) -> bool:
    """Whether `fn` is called as `fn(job, tx)` (True) or `fn(job)` (False); raises
    ConfigError when it can be called neither way, or not the way `transaction` asks."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C extensions don't say
        if transaction is None:
            raise ConfigError(f"the handler of {kind!r} has no signature to read: say how to call it with "
                              "transaction=True (fn(job, tx)) or transaction=False (fn(job))") from None
        return transaction
    with_tx, job_only = _accepts(signature, _JOB, _TX), _accepts(signature, _JOB)
    if transaction is None:
        if not (with_tx or job_only):
            raise ConfigError(f"the handler of {kind!r} must take (job) or (job, tx), not {signature}")
        return with_tx
    if transaction and not with_tx:
        raise ConfigError(f"the handler of {kind!r} has transaction=True but cannot be called as fn(job, tx): "
                          f"its signature is {signature}")
    if not transaction and not job_only:
        raise ConfigError(f"the handler of {kind!r} has transaction=False but cannot be called as fn(job): "
                          f"its signature is {signature}")
    return transaction


def _accepts(signature: inspect.Signature, *args: object) -> bool:
    try:
        signature.bind(*args)
    except TypeError:
        return False
    return True
