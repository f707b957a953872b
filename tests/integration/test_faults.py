"""Database failures as users meet them (issue 4, item 5), one regression test per bug the
chaos suite found, plus the behaviour promised under statement timeouts.

Network faults go through the chaos suite's TCP proxy (tests/chaos/proxy.py) between the
worker and the test database; the shared server itself is never touched.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue
from pgqueue._dsn import server_address
from pgqueue.migrate import migrate
from tests.apps.support import create_test_tables, enqueue_sql, job_row, ledger, state_of, worker_process
from tests.chaos.cluster import PrivateCluster, unavailable_reason
from tests.chaos.proxy import Proxy
from tests.conftest import async_wait_until, running_worker, wait_until


@pytest.fixture
def proxy(dsn: str) -> Iterator[Proxy]:
    info = conninfo_to_dict(dsn)
    p = Proxy(str(info.get("host", "127.0.0.1")), int(str(info.get("port", 5432))))
    p.start()
    try:
        yield p
    finally:
        p.close()


def via(dsn: str, proxy: Proxy) -> str:
    return make_conninfo(dsn, host="127.0.0.1", port=proxy.port)


def backends(conn: psycopg.Connection[Any], purpose: str) -> list[int]:
    """Client pids (from application_name) of this database's pgqueue connections."""
    rows = conn.execute(
        "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE %s",
        [f"pgqueue {purpose} %"],
    ).fetchall()
    return sorted(int(r[0].rsplit(" ", 1)[1]) for r in rows)


# -- the listener ----------------------------------------------------------------------


async def test_listener_replaces_a_connection_that_went_silent(
    app: pgqueue.App, dsn: str, proxy: Proxy, conn: psycopg.Connection[Any]
) -> None:
    """Bug: the health check (``SELECT 1``) had no deadline. A connection whose peer
    vanished without FIN or RST blocked it forever, and the listener stayed "connected"
    while hearing nothing, so every pickup waited for the slow safety-net poll."""
    app.configure(dsn=via(dsn, proxy))

    @app.task(name="noop")
    def noop() -> None:
        pass

    async with running_worker(app, listener_health_interval=0.5) as worker:
        listener = worker.listener
        assert listener is not None
        await async_wait_until(listener.connected.is_set)
        first = listener.backend_pid
        try:
            proxy.set_mode("stale")  # every connection open now hangs; new ones pass
            await async_wait_until(lambda: listener.connected.is_set() and listener.backend_pid != first, timeout=30)
            assert listener.reconnects >= 1
            alive = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [listener.backend_pid])
            assert alive.fetchone() == (1,)
        finally:
            proxy.heal()


# -- the supervisor --------------------------------------------------------------------


def test_supervisor_keeps_its_workers_when_a_child_restarts_during_an_outage(
    dsn: str, conn: psycopg.Connection[Any], proxy: Proxy, tmp_path: Path
) -> None:
    """Bug: a child that (re)started while the database was unreachable exited as
    "cannot start", and the supervisor then stopped every worker for good. A database
    outage is transient: the child must be restarted with backoff like any crash."""
    create_test_tables(conn)
    proxied = via(dsn, proxy)
    with worker_process(
        proxied, "tests.apps.basic:app", "--processes", "2", "--poll-interval", "0.2", log=tmp_path / "w.log"
    ) as parent:
        children = wait_until(lambda: len(backends(conn, "listener")) == 2 and backends(conn, "listener"), timeout=60)
        proxy.set_mode("reset")  # the database is unreachable from the workers
        os.kill(children[0], signal.SIGKILL)
        # The restarted child cannot connect (reset by the proxy): it waits, saying so and naming
        # the server, one line per attempt.
        wait_until(
            lambda: f"the connection to the database server at {server_address(proxied)}" in parent.output(),
            timeout=30,
        )
        assert "cannot reach the database at host=127.0.0.1" in parent.output()
        assert parent.alive(), parent.output()
        proxy.heal()
        job_id = enqueue_sql(conn, "record", '{"key": "after-outage"}')
        wait_until(lambda: state_of(conn, job_id) == "completed", timeout=60)
        assert ledger(conn, "after-outage") == [("done", ledger(conn, "after-outage")[0][1])]
        wait_until(lambda: len(backends(conn, "listener")) == 2, timeout=60)
        assert "stopping all workers" not in parent.output()
        parent.signal(signal.SIGTERM)
        assert parent.wait(60) == 0, parent.output()


# -- statement timeouts ----------------------------------------------------------------


async def test_statement_timeout_fails_the_attempt_with_a_clear_error_and_nothing_sticks(
    app: pgqueue.App, dsn: str, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A server-side statement_timeout that cancels a handler's query fails that attempt
    (retried, then discarded with the server's message); the worker carries on."""
    app.configure(dsn=make_conninfo(dsn, options="-c statement_timeout=200"))

    @app.task(name="too_slow", transactional=True, max_attempts=2, retry=pgqueue.Backoff(base=0, cap=0))
    def too_slow(ctx: pgqueue.JobContext) -> None:
        ctx.conn.execute("SELECT pg_sleep(2)")

    @app.task(name="quick", transactional=True)
    def quick(ctx: pgqueue.JobContext) -> None:
        ctx.conn.execute("SELECT 1")

    slow_id = too_slow.enqueue(conn)
    quick_id = quick.enqueue(conn)
    with caplog.at_level(logging.INFO, logger="pgqueue"):
        async with running_worker(app) as worker:
            await async_wait_until(lambda: state_of(conn, slow_id) == "discarded", timeout=30)
            await async_wait_until(lambda: state_of(conn, quick_id) == "completed", timeout=30)
            assert worker.in_flight == 0
    row = job_row(conn, slow_id)
    assert row["attempt"] == 2
    assert [e["type"] for e in row["errors"]] == ["psycopg.errors.QueryCanceled"] * 2
    assert all("statement timeout" in e["message"] for e in row["errors"])
    lines = [r.getMessage() for r in caplog.records if f"job {slow_id} " in r.getMessage()]
    assert any("discarded" in line and "statement timeout" in line for line in lines), lines
    live = conn.execute("SELECT count(*) FROM pgqueue.jobs_live").fetchone()
    assert live == (0,)


# -- connections that hang --------------------------------------------------------------


async def test_worker_abandons_pool_connections_that_hang_and_carries_on(
    app: pgqueue.App, dsn: str, proxy: Proxy, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Bug: the worker's own queries (claim, heartbeat, outcomes, maintenance) had no
    deadline. On a connection whose peer vanished without FIN or RST, a claim waited
    forever and the worker never ran another job, although new connections worked."""
    app.configure(dsn=via(dsn, proxy))
    done: list[int] = []

    @app.task(name="noop", pass_context=True)
    async def noop(ctx: pgqueue.JobContext) -> None:
        done.append(ctx.job.id)

    async with running_worker(app, listen=False, lease=2, heartbeat_interval=0.5) as worker:
        first = noop.enqueue(conn)
        # The worker's own count, not the row: the row turns completed at the commit, and
        # the worker learns it only when it reads the reply. Freezing the connection in
        # between would strand that reply, and the run would count one completion.
        await async_wait_until(lambda: worker.stats.completed == 1)
        assert state_of(conn, first) == "completed"
        try:
            proxy.set_mode("stale")  # every connection open now hangs; new ones pass
            with caplog.at_level(logging.WARNING, logger="pgqueue"):
                # One of its queries (claim, heartbeat, maintenance) meets a frozen pool
                # connection and gives up on it: awaited, since which query and when
                # depends on the pool (a new connection, opened meanwhile, passes).
                await async_wait_until(
                    lambda: any("no answer within" in r.getMessage() for r in caplog.records), timeout=60
                )
                # ... and it carries on: a new job runs.
                second = noop.enqueue(conn)
                await async_wait_until(lambda: state_of(conn, second) == "completed", timeout=90)
        finally:
            proxy.heal()
        assert done == [first, second]
        await async_wait_until(lambda: worker.stats.completed == 2)  # the answer follows the commit


# -- too many clients --------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_cluster() -> Iterator[PrivateCluster]:
    """A private server (never the shared one) with a database ``app`` owned by a plain
    role ``app``, whose connection limit the tests may lower."""
    if unavailable_reason() is not None:
        pytest.skip(f"no private cluster: {unavailable_reason()}")
    cluster = PrivateCluster(max_connections=30)
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn(), autocommit=True) as c:
            c.execute("CREATE ROLE app LOGIN")
            c.execute("CREATE DATABASE app OWNER app")
        with psycopg.connect(cluster.dsn("app", user="app"), autocommit=True) as c:
            migrate(c, "pgqueue")
        yield cluster
    finally:
        cluster.destroy()


async def test_worker_rides_out_a_server_that_refuses_new_connections(
    small_cluster: PrivateCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """No connection to be had (the role's limit is reached, as with "too many clients"):
    the worker's pool cannot replace its lost connections. The worker says so in one clear
    line, keeps trying, and once connections are allowed again it runs the job that
    waited; nothing is left stuck."""
    app = pgqueue.App(dsn=small_cluster.dsn("app", user="app"))
    done: list[int] = []

    @app.task(name="noop", pass_context=True)
    async def noop(ctx: pgqueue.JobContext) -> None:
        done.append(ctx.job.id)

    with psycopg.connect(small_cluster.dsn("app"), autocommit=True) as admin:
        try:
            async with running_worker(app, listen=False) as worker:
                with caplog.at_level(logging.WARNING):
                    admin.execute("ALTER ROLE app CONNECTION LIMIT 0")  # open ones stay, no new ones
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                        [f"pgqueue worker {os.getpid()}"],
                    )
                    job_id = noop.enqueue(admin)
                    # Wait for the claim's own line: other services (the tick) hit the empty
                    # pool too, and under load one of them may say so first.
                    await async_wait_until(
                        lambda: any(
                            r.getMessage().startswith("claim failed (couldn't get a connection")
                            and "pool is exhausted" in r.getMessage()
                            for r in caplog.records
                        ),
                        timeout=90,
                    )
                    assert done == []
                    admin.execute("ALTER ROLE app CONNECTION LIMIT -1")
                    await async_wait_until(lambda: state_of(admin, job_id) == "completed", timeout=60)
                assert done == [job_id]
                assert admin.execute("SELECT count(*) FROM pgqueue.jobs_live").fetchone() == (0,)
                await async_wait_until(lambda: worker.stats.completed == 1)
        finally:
            admin.execute("ALTER ROLE app CONNECTION LIMIT -1")
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("pgqueue")]
    claim = [line for line in lines if line.startswith("claim failed (couldn't get a connection")]
    assert claim, lines
    assert all("\n" not in line for line in lines), lines


async def test_postgres_restart_mid_job_the_worker_reconnects_and_finishes_it(
    small_cluster: PrivateCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A restart while a job runs: the worker keeps the handler going, writes its outcome
    once the server is back (the lease is still valid), then claims new jobs, without
    being restarted itself. Every warning it logs on the way is a single line."""
    app = pgqueue.App(dsn=small_cluster.dsn("app", user="app"))
    started, release = asyncio.Event(), asyncio.Event()
    done: list[int] = []

    @app.task(name="held", pass_context=True)
    async def held(ctx: pgqueue.JobContext) -> None:
        started.set()
        await release.wait()
        done.append(ctx.job.id)

    @app.task(name="after", pass_context=True)
    async def after(ctx: pgqueue.JobContext) -> None:
        done.append(ctx.job.id)

    with psycopg.connect(small_cluster.dsn("app"), autocommit=True) as c:
        c.execute("TRUNCATE pgqueue.jobs")
        first = held.enqueue(c)
    with caplog.at_level(logging.WARNING):
        async with running_worker(app, lease=30, heartbeat_interval=1) as worker:
            await asyncio.wait_for(started.wait(), 20)
            listener = worker.listener
            assert listener is not None
            await asyncio.to_thread(small_cluster.restart, "fast")
            release.set()
            with psycopg.connect(small_cluster.dsn("app"), autocommit=True) as c:
                await async_wait_until(lambda: state_of(c, first) == "completed", timeout=60)
                second = after.enqueue(c)
                await async_wait_until(lambda: state_of(c, second) == "completed", timeout=60)
                row = job_row(c, first)
            await async_wait_until(lambda: listener.connected.is_set() and listener.reconnects >= 1)
    assert done == [first, second]
    assert (row["attempt"], row["errors"]) == (1, [])
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("pgqueue")]
    assert warnings, "the restart went unnoticed"
    assert all("\n" not in w for w in warnings), warnings


# -- shutdown with no database -------------------------------------------------------------


async def test_worker_stops_when_it_cannot_write_its_last_outcomes(
    app: pgqueue.App, dsn: str, proxy: Proxy, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A worker told to stop while the database refuses it: it tries to write the outcome
    of the job it finished for a bounded time, says it could not, and stops. The job stays
    running under its lease (never lost, never completed without a record), for the
    rescuer to retry."""
    app.configure(dsn=via(dsn, proxy))
    finish = asyncio.Event()

    @app.task(name="gated")
    async def gated() -> None:
        await finish.wait()

    with caplog.at_level(logging.WARNING, logger="pgqueue"):
        async with running_worker(app, listen=False, shutdown_timeout=0.5, stop_timeout=60) as worker:
            job_id = gated.enqueue(conn)
            await async_wait_until(lambda: worker.in_flight == 1)
            proxy.set_mode("reset")  # every connection dropped, new ones refused
            worker.stop()
            finish.set()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("pgqueue")]
    assert any(line.startswith("could not write 1 job outcomes before exiting") for line in lines), lines
    assert worker.stats.completed == 0
    assert state_of(conn, job_id) == "running"
