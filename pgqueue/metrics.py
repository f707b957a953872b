"""Prometheus metrics of one worker process (``pgqueue work --metrics-port N``).

Every worker gets its own :class:`prometheus_client.CollectorRegistry`, so several workers
can run in one process (tests) without mixing their series.

* Counters per queue and task: ``pgqueue_jobs_claimed_total``, ``..._completed_total``,
  ``..._failed_total`` (attempts that raised: retried or discarded), ``..._retried_total``,
  ``..._discarded_total``, ``..._cancelled_total``, ``..._snoozed_total`` (attempts put
  off by ``Snooze``, their attempt given back); ``pgqueue_outcomes_refused_total``
  (outcomes fenced off because the lease had been lost).
* Histograms: ``pgqueue_job_duration_seconds`` (queue, task) and
  ``pgqueue_job_pickup_latency_seconds`` (queue): time from ``run_at`` to the claim, on
  the database clock.
* Gauges: ``pgqueue_jobs_in_flight``, ``pgqueue_listener_connected``, and per queue this
  worker serves ``pgqueue_queue_depth`` (label ``state``: available, scheduled, running,
  retryable), ``pgqueue_queue_lag_seconds``, ``pgqueue_queue_paused`` (1/0) and, for
  queues with a global limit, ``pgqueue_queue_concurrency_limit``. The queue gauges come from the
  ``queue_stats`` view, queried only when scraped and at most every
  ``refresh_interval`` seconds, so an idle, unscraped worker makes no extra queries.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ._db.admin import metrics_queue_stats
from ._db.sql import validate_schema
from .config import WorkerConfig
from .errors import ConfigError
from .models import Job, JobState

__all__ = ["QueueStatsCollector", "WorkerMetrics", "serve_metrics"]

log = logging.getLogger("pgqueue.metrics")

_LABELS = ("queue", "task")
_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
_PICKUP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
_DEPTH_STATES = ("available", "scheduled", "running", "retryable")


class QueueStatsCollector(Collector):
    """Queue depth and lag gauges, read from ``queue_stats`` when scraped (cached)."""

    def __init__(self, dsn: str, schema: str, queues: Sequence[str], *, refresh_interval: float = 5.0) -> None:
        self.dsn = dsn
        self.schema = validate_schema(schema)
        self.queues = list(queues)
        self.refresh_interval = refresh_interval
        self.queries = 0  # how many times the view was read (tests check the cache)
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._rows: dict[str, tuple[float | None, ...]] = {}
        self._fresh_until = 0.0

    def describe(self) -> Iterable[Metric]:
        return self._families()  # names only: no query at registration

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            if time.monotonic() >= self._fresh_until:
                self._refresh()
            rows = dict(self._rows)
        depth, lag, paused, limit = self._families()
        for queue in self.queues:
            row = rows.get(queue, (0.0,) * 6 + (None,))
            for state, value in zip(_DEPTH_STATES, row[:4], strict=True):
                depth.add_metric([queue, state], value or 0.0)
            lag.add_metric([queue], row[4] or 0.0)
            paused.add_metric([queue], row[5] or 0.0)
            if row[6] is not None:
                limit.add_metric([queue], row[6])
        return [depth, lag, paused, limit]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("pgqueue_queue_depth", "Live jobs per queue and state.", labels=["queue", "state"]),
            GaugeMetricFamily(
                "pgqueue_queue_lag_seconds", "Age of the oldest available job per queue.", labels=["queue"]
            ),
            GaugeMetricFamily("pgqueue_queue_paused", "1 while the queue is paused, else 0.", labels=["queue"]),
            GaugeMetricFamily(
                "pgqueue_queue_concurrency_limit",
                "Most jobs of the queue running at once across every worker (queues with a limit only).",
                labels=["queue"],
            ),
        )

    def _refresh(self) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
            rows = metrics_queue_stats(self._conn, self.schema, self.queues)
            self.queries += 1
            self._rows = {r[0]: tuple(None if v is None else float(v) for v in r[1:]) for r in rows}
        except psycopg.Error as exc:
            log.warning("metrics: cannot read queue_stats (%s)", exc)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        self._fresh_until = time.monotonic() + self.refresh_interval


class WorkerMetrics:
    """The metrics of one worker, and (optionally) the HTTP endpoint serving them."""

    def __init__(
        self,
        *,
        dsn: str,
        schema: str,
        queues: Sequence[str],
        in_flight: Callable[[], float],
        listener_connected: Callable[[], float],
        refresh_interval: float = 5.0,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.claimed = Counter("pgqueue_jobs_claimed", "Jobs claimed.", _LABELS, registry=r)
        self.completed = Counter("pgqueue_jobs_completed", "Jobs completed.", _LABELS, registry=r)
        self.failed = Counter(
            "pgqueue_jobs_failed", "Attempts that failed (then retried or discarded).", _LABELS, registry=r
        )
        self.retried = Counter("pgqueue_jobs_retried", "Failed attempts that will be retried.", _LABELS, registry=r)
        self.discarded = Counter("pgqueue_jobs_discarded", "Jobs discarded (dead letter).", _LABELS, registry=r)
        self.cancelled = Counter("pgqueue_jobs_cancelled", "Jobs cancelled.", _LABELS, registry=r)
        self.snoozed = Counter(
            "pgqueue_jobs_snoozed", "Attempts that snoozed (put off without using an attempt).", _LABELS, registry=r
        )
        self.refused = Counter(
            "pgqueue_outcomes_refused", "Outcomes refused because the lease was lost.", _LABELS, registry=r
        )
        self.duration = Histogram(
            "pgqueue_job_duration_seconds", "Handler run time.", _LABELS, buckets=_DURATION_BUCKETS, registry=r
        )
        self.pickup = Histogram(
            "pgqueue_job_pickup_latency_seconds",
            "Time from a job's run_at to its claim (database clock).",
            ("queue",),
            buckets=_PICKUP_BUCKETS,
            registry=r,
        )
        Gauge("pgqueue_jobs_in_flight", "Jobs running in this worker.", registry=r).set_function(in_flight)
        Gauge(
            "pgqueue_listener_connected", "1 while the LISTEN connection is up, else 0 (polling).", registry=r
        ).set_function(listener_connected)
        self.queue_stats = QueueStatsCollector(dsn, schema, queues, refresh_interval=refresh_interval)
        r.register(self.queue_stats)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # -- recording (called on the worker's loop) ------------------------------------------

    def jobs_claimed(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            self.claimed.labels(job.queue, job.task).inc()
            self.pickup.labels(job.queue).observe(max(job.pickup_delay.total_seconds(), 0.0))

    def job_finished(self, job: Job, state: JobState, seconds: float | None) -> None:
        labels = (job.queue, job.task)
        if state is JobState.COMPLETED:
            self.completed.labels(*labels).inc()
        elif state is JobState.RETRYABLE:
            self.failed.labels(*labels).inc()
            self.retried.labels(*labels).inc()
        elif state is JobState.DISCARDED:
            self.failed.labels(*labels).inc()
            self.discarded.labels(*labels).inc()
        elif state is JobState.CANCELLED:
            self.cancelled.labels(*labels).inc()
        elif state is JobState.AVAILABLE or state is JobState.SCHEDULED:  # a snooze
            self.snoozed.labels(*labels).inc()
        if seconds is not None:
            self.duration.labels(*labels).observe(seconds)

    def outcome_refused(self, job: Job) -> None:
        self.refused.labels(job.queue, job.task).inc()

    # -- HTTP endpoint ---------------------------------------------------------------------

    def serve(self, host: str, port: int, span: int = 1) -> int:
        """Serve ``/metrics`` on the first free port of ``port .. port + span - 1`` (any
        free port when ``port`` is 0); returns the port bound."""
        last: OSError | None = None
        for candidate in range(port, port + (1 if port == 0 else span)):
            try:
                self._server, self._thread = start_http_server(candidate, host, registry=self.registry)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                last = exc
                continue
            self.port = int(self._server.server_port)
            log.info("metrics served on http://%s:%d/metrics", host, self.port)
            return self.port
        raise OSError(errno.EADDRINUSE, f"metrics port busy: {port}..{port + span - 1} ({last})")

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.queue_stats.close()


async def serve_metrics(
    config: WorkerConfig,
    *,
    dsn: str,
    schema: str,
    queues: Sequence[str],
    in_flight: Callable[[], float],
    listener_connected: Callable[[], float],
) -> WorkerMetrics | None:
    """A worker's metrics, served per its ``config``; None when ``metrics_port`` is None.

    Raises :class:`~pgqueue.ConfigError` when no port of the range can be bound.
    """
    if config.metrics_port is None:
        return None
    metrics = WorkerMetrics(
        dsn=dsn, schema=schema, queues=queues, in_flight=in_flight, listener_connected=listener_connected
    )
    try:
        await asyncio.to_thread(metrics.serve, config.metrics_host, config.metrics_port, config.metrics_port_span)
    except OSError as exc:
        metrics.close()
        raise ConfigError(f"cannot serve metrics on {config.metrics_host}:{config.metrics_port}: {exc}") from exc
    return metrics
