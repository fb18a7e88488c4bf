"""A worker's options, checked once at construction (pure: unit-tested without a database)."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from ._errors import ConfigError

MAX_JOBS_PER_LEASE = 1000  # lease_jobs()'s max_jobs: at most 1000 jobs a call
MAX_CONCURRENCY = MAX_JOBS_PER_LEASE
MAX_PREFETCH = 10000  # leased ahead in lease_jobs() calls of up to 1000 each
MIN_LEASE_S, MAX_LEASE_S = 3.0, 3600.0  # lease_jobs()'s and renew_leases()'s bounds


@dataclass(frozen=True)
class Options:
    queues: dict[str, int]  # queue -> concurrency (handler threads, each with its own connection)
    schema: str  # the oncely schema (default "oncely")
    name: str  # names this worker in jobs.lease_holder and the logs
    poll_interval: float  # seconds between leases of an idle queue (±10% jitter); NOTIFY wakes it sooner
    shutdown_grace: float  # seconds running handlers may finish after a stop, before their jobs are given back
    lease: float | None  # seconds; None: each queue's policy's lease
    renew_interval: float  # seconds between renewals of every held lease
    prefetch: int | None  # jobs leased ahead per queue, waiting for a slot; None: the queue's concurrency
    # (a queue with limits across workers leases nothing ahead, whatever this says: _worker.py)

    def ahead(self, queue: str) -> int:
        """How many jobs of `queue` may wait for a slot, leased (and renewed) ahead."""
        return self.queues[queue] if self.prefetch is None else self.prefetch


def _seconds(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number of seconds, not {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{name} must be {'> 0' if positive else '>= 0'} seconds, not {value}")
    return float(value)


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def check_options(queues: Mapping[str, int], *, schema: str = "oncely", name: str | None = None,
                  poll_interval: float = 1.0, shutdown_grace: float = 30.0, lease: float | None = None,
                  renew_interval: float = 1.0, prefetch: int | None = None) -> Options:
    """Validates a worker's options; raises ConfigError naming the first one that is wrong."""
    if not isinstance(queues, Mapping) or not queues:
        raise ConfigError("queues must be a non-empty mapping of queue name to concurrency, e.g. {'default': 4}")
    checked: dict[str, int] = {}
    for queue, concurrency in queues.items():
        if not isinstance(queue, str) or not queue or len(queue.encode()) > 128:
            raise ConfigError(f"queue names must be non-empty strings of at most 128 bytes, not {queue!r}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ConfigError(f"queues[{queue!r}]: concurrency must be an integer in 1..{MAX_CONCURRENCY}, "
                              f"not {concurrency!r}")
        checked[queue] = concurrency
    if not isinstance(schema, str) or not schema or "\x00" in schema:
        raise ConfigError(f"schema must be a non-empty string, not {schema!r}")
    if name is None:
        name = default_name()
    if not isinstance(name, str) or not name:
        raise ConfigError(f"name must be a non-empty string or None, not {name!r}")
    poll = _seconds("poll_interval", poll_interval, positive=True)
    grace = _seconds("shutdown_grace", shutdown_grace, positive=False)
    renew = _seconds("renew_interval", renew_interval, positive=True)
    lease_s = None
    if lease is not None:
        lease_s = _seconds("lease", lease, positive=True)
        if not MIN_LEASE_S <= lease_s <= MAX_LEASE_S:
            raise ConfigError(f"lease must be {MIN_LEASE_S:g}..{MAX_LEASE_S:g} seconds, not {lease_s:g}")
        if renew > lease_s / 2:
            raise ConfigError(f"renew_interval ({renew:g}s) must be at most half the lease ({lease_s:g}s), "
                              "or a slow renewal loses leases that are still running")
    if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int)
                                 or not 0 <= prefetch <= MAX_PREFETCH):
        raise ConfigError(f"prefetch must be an integer in 0..{MAX_PREFETCH} or None, not {prefetch!r}")
    return Options(queues=checked, schema=schema, name=name, poll_interval=poll, shutdown_grace=grace,
                   lease=lease_s, renew_interval=renew, prefetch=prefetch)
