"""Worker settings: one frozen dataclass, validated on creation, every field documented."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import ConfigError, InvalidQueueError

__all__ = [
    "ALIVE_INTERVALS",
    "DEAD_WORKER_GRACE",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_QUEUE",
    "WorkerConfig",
    "validate_queue",
]

DEFAULT_QUEUE = "default"
#: Attempts a job gets when neither its task nor its enqueue says otherwise.
DEFAULT_MAX_ATTEMPTS = 20
DAY = 86_400.0
#: A worker counts as alive for this many heartbeat intervals after its last heartbeat.
ALIVE_INTERVALS = 3
#: A registration expired for this long (seconds) is removed by maintenance.
DEAD_WORKER_GRACE = 300.0
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


def validate_queue(queue: str) -> str:
    """Return ``queue`` if it is a valid queue name, else raise :class:`InvalidQueueError`."""
    if not isinstance(queue, str) or not _QUEUE_NAME.fullmatch(queue):
        raise InvalidQueueError(
            f"invalid queue name {queue!r}: use 1-64 characters (letters, digits, _ . : -), "
            "starting with a letter or digit"
        )
    return queue


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker process claims, runs and reports jobs.

    Times are in seconds. Every comparison of times happens on the database clock; these
    values only size intervals.
    """

    #: Queues to serve. ``None`` means every queue named by a registered task, plus
    #: ``"default"``.
    queues: tuple[str, ...] | None = None
    #: Jobs run at once by this process (asyncio tasks; sync handlers use a thread pool),
    #: shared by every queue without its own slots in ``queue_concurrency``.
    concurrency: int = 10
    #: Queues with slots of their own in this process: ``{"images": 5, "emails": 20}``
    #: runs up to 5 image jobs and 20 email jobs at once, whatever the other queues do.
    #: These queues are served even when ``queues`` is None. Limits across every process
    #: live in the database (``pgqueue queues limit``).
    queue_concurrency: Mapping[str, int] = field(default_factory=dict)
    #: Lease taken at claim. A job whose lease expires (worker killed, hung, partitioned
    #: away) is rescued and retried. Heartbeats extend it while the handler runs, so it
    #: bounds recovery time, not job duration.
    lease: float = 30.0
    #: How often held leases are extended; must be well under ``lease``.
    heartbeat_interval: float = 10.0
    #: Polling when LISTEN is off or its connection is down: the pickup latency bound then.
    poll_interval: float = 1.0
    #: Safety-net polling while the LISTEN connection is healthy. Every path that makes a
    #: job available notifies, so this only guards against the unforeseen (e.g. rows edited
    #: by hand); keeping it long keeps an idle worker near one query per second.
    poll_interval_listening: float = 5.0
    #: On stop: how long in-flight jobs may run before they are released to ``available``.
    shutdown_timeout: float = 30.0
    #: Use LISTEN/NOTIFY for instant wake-up. Off means polling only.
    listen: bool = True
    #: Most jobs claimed in one statement: the free slots, plus, for jobs shorter than a
    #: claim's round trip, jobs claimed ahead to start as slots free up (worker/prefetch.py).
    fetch_batch: int = 100
    #: Completions are written in batches of at most this many ...
    completion_batch: int = 500
    #: ... and at most this long after the first outcome of a batch was ready.
    completion_interval: float = 0.005
    #: How often the maintenance tick (scheduler + rescuer) is attempted; one process wins
    #: it each time through an advisory lock.
    maintenance_interval: float = 1.0
    #: How often finished-job partitions are created ahead (and on start).
    partition_interval: float = 600.0
    #: Days of finished-job partitions kept created ahead of today.
    partition_days_ahead: int = 2
    #: How often the live partition's dead tuples are checked; when they exceed
    #: ``vacuum_threshold`` (and the live rows), one process runs VACUUM on it. This keeps
    #: claims fast where autovacuum is off or too slow for a queue's churn. 0 disables it.
    vacuum_interval: float = 10.0
    vacuum_threshold: int = 20_000
    #: How often the LISTEN connection is checked while it is quiet.
    listener_health_interval: float = 15.0
    #: Default attempts for jobs whose task is unknown to the rescuer's process.
    default_max_attempts: int = DEFAULT_MAX_ATTEMPTS
    #: A claim from the head of the claim index that takes this long (seconds) means dead
    #: index entries are piling up (a long-held snapshot): the worker then resumes claims
    #: after the last job it took, rewinding now and then (see _claim_cursor). 0: never.
    claim_cursor_threshold: float = 0.02
    #: Identifies this process in job rows and errors; generated when empty.
    worker_id: str = ""
    #: How long finished jobs are kept, per final state, in seconds (0: forever). Whole
    #: day partitions are dropped once their day is older than this, so rows stay between
    #: this and one day longer; yesterday's and today's partitions are always kept. The
    #: maintenance leader applies its own values (give every worker the same) every
    #: ``partition_interval`` and records them in the ``settings`` table.
    retention_completed: float = DAY
    retention_discarded: float = 14 * DAY
    retention_cancelled: float = 7 * DAY
    #: Serve Prometheus metrics over HTTP on this port (0: any free port); None: off.
    metrics_port: int | None = None
    #: Address the metrics endpoint binds to.
    metrics_host: str = "0.0.0.0"
    #: Ports to try from ``metrics_port`` on: with ``--processes N`` each process takes the
    #: first free one of ``metrics_port .. metrics_port + N - 1``.
    metrics_port_span: int = 1
    #: At start, wait for an unreachable database (retrying with backoff from 0.5 s up to
    #: 30 s, one warning per attempt) instead of raising ``DatabaseUnavailableError``.
    #: ``stop()`` ends the wait. ``pgqueue work`` turns it on, as a service manager expects.
    wait_for_database: bool = False

    def __post_init__(self) -> None:
        if self.queues is not None:
            if not self.queues:
                raise ConfigError("queues must not be empty (use None for the default)")
            for queue in self.queues:
                validate_queue(queue)
        for queue, slots in self.queue_concurrency.items():
            validate_queue(queue)
            if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
                raise ConfigError(f"queue_concurrency[{queue!r}] must be a positive int, got {slots!r}")
            if self.queues is not None and queue not in self.queues:
                raise ConfigError(
                    f"queue_concurrency names {queue!r}, which is not among the queues served "
                    f"({', '.join(self.queues)})"
                )
        positive = {
            "concurrency": self.concurrency,
            "lease": self.lease,
            "heartbeat_interval": self.heartbeat_interval,
            "poll_interval": self.poll_interval,
            "poll_interval_listening": self.poll_interval_listening,
            "fetch_batch": self.fetch_batch,
            "completion_batch": self.completion_batch,
            "maintenance_interval": self.maintenance_interval,
            "partition_interval": self.partition_interval,
            "listener_health_interval": self.listener_health_interval,
            "default_max_attempts": self.default_max_attempts,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ConfigError(f"{name} must be positive, got {value!r}")
        if self.claim_cursor_threshold < 0:
            raise ConfigError("claim_cursor_threshold must not be negative")
        if self.vacuum_interval < 0 or self.vacuum_threshold < 0:
            raise ConfigError("vacuum_interval and vacuum_threshold must not be negative")
        if self.shutdown_timeout < 0 or self.completion_interval < 0:
            raise ConfigError("shutdown_timeout and completion_interval must not be negative")
        for name in ("retention_completed", "retention_discarded", "retention_cancelled"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name} must be 0 (keep forever) or a positive number of seconds")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be between 0 and 65535, got {self.metrics_port!r}")
        if self.metrics_port_span < 1:
            raise ConfigError("metrics_port_span must be at least 1")
        if self.partition_days_ahead < 1:
            raise ConfigError("partition_days_ahead must be at least 1")
        if self.heartbeat_interval * 2 > self.lease:
            raise ConfigError(
                f"heartbeat_interval ({self.heartbeat_interval}s) must be at most half the "
                f"lease ({self.lease}s), or leases expire between heartbeats"
            )
