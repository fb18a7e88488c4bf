"""A worker's options and handler registration, without a database."""

from __future__ import annotations

from typing import Any

import pytest

from oncely import ConfigError, Job, Worker
from oncely._options import check_options

DSN = "postgresql://user:secret@db.invalid/app"


def test_defaults() -> None:
    o = check_options({"emails": 10})
    assert o.queues == {"emails": 10}
    assert (o.schema, o.poll_interval, o.shutdown_grace, o.lease, o.renew_interval) == ("oncely", 1.0, 30.0, None, 1.0)
    assert o.name
    assert o.ahead("emails") == 10  # prefetch None: as many waiting as running
    assert check_options({"emails": 10}, prefetch=0).ahead("emails") == 0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"queues": {}}, "non-empty mapping"),
    ({"queues": ["emails"]}, "non-empty mapping"),
    ({"queues": {"": 1}}, "queue names"),
    ({"queues": {"q" * 129: 1}}, "queue names"),
    ({"queues": {"emails": 0}}, "concurrency"),
    ({"queues": {"emails": 1001}}, "concurrency"),
    ({"queues": {"emails": 2.5}}, "concurrency"),
    ({"queues": {"emails": True}}, "concurrency"),
    ({"schema": ""}, "schema"),
    ({"name": ""}, "name"),
    ({"poll_interval": 0}, "poll_interval"),
    ({"poll_interval": float("nan")}, "poll_interval"),
    ({"shutdown_grace": -1}, "shutdown_grace"),
    ({"renew_interval": 0}, "renew_interval"),
    ({"lease": 2}, "lease must be 3..3600"),
    ({"lease": 3601}, "lease must be 3..3600"),
    ({"lease": 3, "renew_interval": 2}, "half the lease"),
    ({"prefetch": -1}, "prefetch"),
    ({"prefetch": 1.5}, "prefetch"),
    ({"prefetch": 10001}, "prefetch"),
])
def test_invalid_options_name_the_option(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"queues": {"emails": 1}, **kwargs}
    with pytest.raises(ConfigError, match=message):
        check_options(args.pop("queues"), **args)


def test_a_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        Worker(DSN, {"emails": 0})


def test_handlers_register_by_kind_once() -> None:
    worker = Worker(DSN, {"emails": 2}, shutdown_grace=0)

    @worker.handler("send_email")
    def send(job: Job, tx: Any) -> None:
        pass

    assert send.__name__ == "send"  # the decorator returns the function
    with pytest.raises(ConfigError, match="has a handler already"):
        worker.register("send_email", send)
    with pytest.raises(ConfigError, match="non-empty"):
        worker.register("", send)
    with pytest.raises(ConfigError, match="callable"):
        worker.register("other", "not a function")  # type: ignore[arg-type]


def test_run_needs_a_handler() -> None:
    with pytest.raises(ConfigError, match="no handler"):
        Worker(DSN, {"emails": 1}).run()


def test_the_dsn_is_not_in_the_worker_repr_or_options() -> None:
    worker = Worker(DSN, {"emails": 1})
    assert "secret" not in repr(worker.options)
    assert "secret" not in repr(vars(worker).get("options"))
