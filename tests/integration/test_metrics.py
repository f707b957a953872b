"""Prometheus metrics, scraped over HTTP from running workers."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import pgqueue
from tests.apps.support import create_test_tables, worker_process
from tests.conftest import async_wait_until, running_worker, wait_until

Conn = psycopg.Connection[Any]
LOCAL = {"metrics_port": 0, "metrics_host": "127.0.0.1"}


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_worker_serves_job_counters_histograms_and_gauges(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="ok", queue="m")
    def ok() -> None: ...

    @app.task(name="bad", queue="m", max_attempts=2)
    def bad() -> None:
        raise ValueError("always")

    @app.task(name="stop", queue="m")
    def stop() -> None:
        raise pgqueue.Cancel("no")

    for _ in range(3):
        ok.enqueue(conn)
    bad.options(max_attempts=2).enqueue(conn)
    stop.enqueue(conn)
    ok.options(delay=3600).enqueue(conn)  # scheduled: shows in the depth gauge

    async with running_worker(app, queues=("m",), **LOCAL) as worker:
        assert worker.metrics is not None
        assert worker.metrics.port
        port = worker.metrics.port
        # bad: attempt 1 retried (backoff), attempt 2 discarded.
        await async_wait_until(lambda: worker.stats.discarded == 1, timeout=60)
        await async_wait_until(lambda: worker.stats.completed == 3 and worker.stats.cancelled == 1)
        await async_wait_until(lambda: worker.listener is not None and worker.listener.connected.is_set())
        samples = await asyncio.to_thread(scrape, port)

    m = {"queue": "m"}
    assert value(samples, "pgqueue_jobs_claimed_total", task="ok", **m) == 3
    assert value(samples, "pgqueue_jobs_claimed_total", task="bad", **m) == 2
    assert value(samples, "pgqueue_jobs_completed_total", task="ok", **m) == 3
    assert value(samples, "pgqueue_jobs_retried_total", task="bad", **m) == 1
    assert value(samples, "pgqueue_jobs_failed_total", task="bad", **m) == 2
    assert value(samples, "pgqueue_jobs_discarded_total", task="bad", **m) == 1
    assert value(samples, "pgqueue_jobs_cancelled_total", task="stop", **m) == 1
    assert value(samples, "pgqueue_job_duration_seconds_count", task="ok", **m) == 3
    assert value(samples, "pgqueue_job_pickup_latency_seconds_count", **m) == 6
    assert value(samples, "pgqueue_jobs_in_flight") == 0
    assert value(samples, "pgqueue_listener_connected") == 1
    assert value(samples, "pgqueue_queue_depth", state="scheduled", **m) == 1
    assert value(samples, "pgqueue_queue_depth", state="available", **m) == 0
    assert value(samples, "pgqueue_queue_lag_seconds", **m) == 0


async def test_queue_gauges_follow_the_queue_and_are_cached_between_scrapes(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="later", queue="g")
    def later() -> None: ...

    async with running_worker(app, queues=("g",), listen=False, poll_interval=30, **LOCAL) as worker:
        assert worker.metrics is not None
        assert worker.metrics.port
        collector = worker.metrics.queue_stats
        collector.refresh_interval = 3600.0  # only the first scrape reads the view
        # Jobs of a task this worker does not run: they stay available whenever its claims
        # happen (it claimed "later" jobs racing the scrape before: 3 == 4).
        for _ in range(4):
            conn.execute("SELECT pgqueue.enqueue('not_here', '{}', 'g', 0, now() - interval '20 seconds')")
        first = await asyncio.to_thread(scrape, worker.metrics.port)
        second = await asyncio.to_thread(scrape, worker.metrics.port)
        assert collector.queries == 1
        assert value(first, "pgqueue_queue_depth", queue="g", state="available") == 4
        assert value(second, "pgqueue_queue_depth", queue="g", state="available") == 4
        assert value(first, "pgqueue_queue_lag_seconds", queue="g") >= 20
        assert value(first, "pgqueue_listener_connected") == 0


async def test_two_workers_in_one_process_keep_separate_registries(app: pgqueue.App, conn: Conn) -> None:
    @app.task(name="a_task", queue="qa")
    def a_task() -> None: ...

    @app.task(name="b_task", queue="qb")
    def b_task() -> None: ...

    a_task.enqueue(conn)
    b_task.enqueue(conn)
    b_task.enqueue(conn)
    async with (
        running_worker(app, queues=("qa",), **LOCAL) as wa,
        running_worker(app, queues=("qb",), **LOCAL) as wb,
    ):
        await async_wait_until(lambda: wa.stats.completed == 1 and wb.stats.completed == 2)
        assert wa.metrics is not None
        assert wb.metrics is not None
        assert wa.metrics.port != wb.metrics.port
        sa = await asyncio.to_thread(scrape, wa.metrics.port or 0)
        sb = await asyncio.to_thread(scrape, wb.metrics.port or 0)
    assert value(sa, "pgqueue_jobs_completed_total", queue="qa", task="a_task") == 1
    assert value(sa, "pgqueue_jobs_completed_total", queue="qb", task="b_task") == 0
    assert value(sb, "pgqueue_jobs_completed_total", queue="qb", task="b_task") == 2


async def test_busy_metrics_port_is_a_clear_start_error(app: pgqueue.App) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = app.worker(metrics_port=port, metrics_host="127.0.0.1")
        with pytest.raises(pgqueue.ConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            await asyncio.wait_for(worker.run(), 30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_cli_worker_serves_metrics(dsn: str, conn: Conn, tmp_path: Path) -> None:
    create_test_tables(conn)
    conn.execute("SELECT pgqueue.enqueue('record', '{\"key\": \"m1\"}')")
    port = free_port()
    args = ("--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--log-format", "json")
    with worker_process(dsn, "tests.apps.basic:app", *args, log=tmp_path / "w.log") as proc:

        def completed() -> float:
            try:
                return value(scrape(port), "pgqueue_jobs_completed_total", queue="default", task="record")
            except OSError:
                return 0.0

        try:
            wait_until(lambda: completed() == 1, timeout=60, interval=0.2)
        except AssertionError:
            raise AssertionError(proc.output()) from None
    assert '"logger": "pgqueue.worker"' in proc.output()
