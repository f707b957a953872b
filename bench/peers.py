"""The Python peers, PgQueuer and procrastinate, behind the same Contender interface.

Each peer is driven through its own public API (schema installer, bulk and single
enqueue); only the "jobs left" count and the between-run TRUNCATE are plain SQL. Both live
beside pgqueue in the bench database without clashing with it:

* PgQueuer in its own schema, ``bench_pgqueuer`` (``DBSettings(db_schema=...)``), with its
  own NOTIFY channel; default (``durable``: every table logged) durability, like pgqueue.
* procrastinate in the connection's default schema (``public``): its SQL names nothing
  schema-qualified and resolves everything through ``search_path``, so a separate schema
  would mean a ``search_path`` on every producer connection. All its objects are prefixed
  ``procrastinate_``, which keeps them apart from ``pgqueue.*`` and ``bench_raw.*``.

The worker side of each is in ``bench/workers/{pgqueuer,procrastinate}_worker.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from functools import cache
from typing import TYPE_CHECKING, Any

import psycopg

from bench._contenders import Conn, Contender, register

if TYPE_CHECKING:
    import procrastinate
    from pgqueuer.domain.settings import DBSettings
    from pgqueuer.queries import Queries, SyncQueries

TASK = "bench.noop"  # PgQueuer entrypoint / procrastinate task name, shared with the workers
PRELOAD_CHUNK = 10_000  # rows per bulk statement; one transaction covers all chunks


# -- PgQueuer ----------------------------------------------------------------------------

PGQUEUER_SCHEMA = "bench_pgqueuer"


@cache
def pgqueuer_settings() -> DBSettings:
    """Where PgQueuer's objects live; the worker builds its queries from the same settings.

    Explicit, so stray ``PGQUEUER_*`` environment variables cannot move the tables away
    from ``remaining_sql``: no name prefix, default names, every table logged.
    """
    from pgqueuer.domain.settings import DBSettings, Durability
    from pgqueuer.domain.types import Channel

    return DBSettings(
        prefix="", db_schema=PGQUEUER_SCHEMA, channel=Channel("bench_pgqueuer"), durability=Durability.durable
    )


def pgqueuer_queries(driver: Any) -> Queries:
    """``Queries`` over an async driver, bound to the bench schema."""
    from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment, QueryQueueBuilder, QuerySchedulerBuilder
    from pgqueuer.queries import Queries

    s = pgqueuer_settings()
    return Queries(driver, qbe=QueryBuilderEnvironment(s), qbq=QueryQueueBuilder(s), qbs=QuerySchedulerBuilder(s))


class _TxDriver:
    """PgQueuer's ``SyncDriver`` port for a connection that is not in autocommit mode.

    ``SyncPsycopgDriver`` refuses such connections (it wants ``autocommit=True``, which is
    still inside the caller's transaction when the caller uses ``conn.transaction()``).
    This is the same ``fetch`` (raw ``$n`` placeholders, dict rows) without that guard, so
    a caller-managed ``BEGIN`` on a non-autocommit connection works too.
    """

    def __init__(self, connection: Conn) -> None:
        self._connection = connection

    def fetch(self, query: str, *args: object) -> list[dict[str, object]]:
        from psycopg import RawCursor
        from psycopg.rows import dict_row

        cursor = RawCursor(self._connection, row_factory=dict_row)
        cursor.execute(query, args or None)
        return cursor.fetchall()


_PGQR_SYNC: tuple[Conn, SyncQueries] | None = None


def _pgqueuer_sync(conn: Conn) -> SyncQueries:
    """PgQueuer's synchronous enqueue API on the caller's own connection (cached per connection)."""
    global _PGQR_SYNC
    if _PGQR_SYNC is not None and _PGQR_SYNC[0] is conn:
        return _PGQR_SYNC[1]
    from pgqueuer.adapters.persistence.qb import QueryQueueBuilder
    from pgqueuer.db import SyncPsycopgDriver
    from pgqueuer.queries import SyncQueries

    driver: Any = SyncPsycopgDriver(conn) if conn.autocommit else _TxDriver(conn)
    queries = SyncQueries(driver, qbq=QueryQueueBuilder(pgqueuer_settings()))
    _PGQR_SYNC = (conn, queries)
    return queries


def _pgqueuer_setup(dsn: str) -> None:
    # What `pgq install` does (install unless already there), through the Queries API.
    async def install() -> None:
        aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:
            from pgqueuer.db import PsycopgDriver

            queries = pgqueuer_queries(PsycopgDriver(aconn))
            if not await queries.schema_is_installed():
                await queries.install()
        finally:
            await aconn.close()

    asyncio.run(install())


def _pgqueuer_reset(conn: Conn) -> None:
    s = pgqueuer_settings().qualified
    conn.execute(f"TRUNCATE {s.queue_table}, {s.queue_table_log}, {s.statistics_table}, {s.schedules_table}")
    conn.execute(f"VACUUM ANALYZE {s.queue_table}, {s.queue_table_log}, {s.statistics_table}")


def _pgqueuer_preload(conn: Conn, n: int) -> None:
    # PgQueuer's batch enqueue (lists instead of scalars): one INSERT ... SELECT FROM
    # UNNEST(arrays) per call, which also writes one 'queued' log row per job. PgQueuer
    # has no COPY path; chunks of PRELOAD_CHUNK keep the arrays bounded, all in one
    # transaction so the jobs appear at once.
    queries = _pgqueuer_sync(conn)
    with conn.transaction():
        for start in range(0, n, PRELOAD_CHUNK):
            size = min(PRELOAD_CHUNK, n - start)
            queries.enqueue([TASK] * size, [None] * size, [0] * size)


def _pgqueuer_enqueue_one(conn: Conn, key: str, sent_at: float) -> None:
    # One INSERT (plus its log row, in the same statement) on the caller's connection and
    # transaction; the statement trigger NOTIFYs the workers at commit.
    payload = json.dumps({"k": key, "t": sent_at}).encode()
    _pgqueuer_sync(conn).enqueue(TASK, payload)


PGQUEUER = Contender(
    name="pgqueuer",
    worker_module="bench.workers.pgqueuer_worker",
    setup=_pgqueuer_setup,
    reset=_pgqueuer_reset,
    preload=_pgqueuer_preload,
    enqueue_one=_pgqueuer_enqueue_one,
    # Finished jobs are deleted from the queue table (and logged), so every row left is
    # unfinished (queued or picked; on_failure="hold" would leave 'failed' rows, unused
    # here). Ends in "FROM <table>" so bench._measure.job_table finds the table.
    remaining_sql=f"SELECT count(*) FROM {PGQUEUER_SCHEMA}.pgqueuer",
    needs=("pgqueuer",),
)


# -- procrastinate -----------------------------------------------------------------------


def procrastinate_app(connector: Any, body: Callable[..., Awaitable[None]] | None = None) -> procrastinate.App:
    """The bench app with its one task, ``bench.noop`` (a no-op unless the worker gives a body)."""
    import procrastinate

    app = procrastinate.App(connector=connector)
    app.task(name=TASK)(body or _procrastinate_noop)
    return app


async def _procrastinate_noop(k: str | None = None, t: float | None = None) -> None:
    pass


@cache
def _procrastinate_defer_app() -> procrastinate.App:
    # Deferring on an explicit connection (`configure(connection=...)`) runs the INSERT on
    # that connection; the connector's pool is never opened, so no DSN is needed here.
    import procrastinate

    return procrastinate_app(procrastinate.SyncPsycopgConnector())


def _procrastinate_setup(dsn: str) -> None:
    # procrastinate's schema applier (what `procrastinate schema --apply` runs). It is not
    # idempotent (plain CREATEs), so it only runs when the jobs table is missing; a schema
    # from another procrastinate version would need its migrations instead.
    import procrastinate

    app = procrastinate_app(procrastinate.SyncPsycopgConnector(conninfo=dsn, min_size=1, max_size=1))
    with app.open():
        if not app.check_connection():
            app.schema_manager.apply_schema()


def _procrastinate_reset(conn: Conn) -> None:
    conn.execute(
        "TRUNCATE procrastinate_events, procrastinate_periodic_defers, procrastinate_jobs, procrastinate_workers"
    )
    conn.execute("VACUUM ANALYZE procrastinate_jobs, procrastinate_events, procrastinate_workers")


def _procrastinate_preload(conn: Conn, n: int) -> None:
    # procrastinate's batch defer: one `procrastinate_defer_jobs_v1(array of jobs)` call per
    # batch (the row trigger still fires a NOTIFY and an event row per job). No COPY path;
    # chunks of PRELOAD_CHUNK in one transaction.
    deferrer = _procrastinate_defer_app().tasks[TASK].configure(connection=conn)
    with conn.transaction():
        for start in range(0, n, PRELOAD_CHUNK):
            deferrer.batch_defer(*({} for _ in range(min(PRELOAD_CHUNK, n - start))))


def _procrastinate_enqueue_one(conn: Conn, key: str, sent_at: float) -> None:
    # `Task.configure(connection=conn).defer(...)`: the documented way to defer inside a
    # transaction the caller manages, on the caller's psycopg (sync) connection.
    _procrastinate_defer_app().tasks[TASK].configure(connection=conn).defer(k=key, t=sent_at)


PROCRASTINATE = Contender(
    name="procrastinate",
    worker_module="bench.workers.procrastinate_worker",
    setup=_procrastinate_setup,
    reset=_procrastinate_reset,
    preload=_procrastinate_preload,
    enqueue_one=_procrastinate_enqueue_one,
    # The worker deletes successful jobs (delete_jobs="successful"), so every row left is
    # todo or doing (a no-op never fails). Ends in "FROM <table>" for bench._measure.job_table.
    remaining_sql="SELECT count(*) FROM procrastinate_jobs",
    needs=("procrastinate",),
)


register(PGQUEUER)
register(PROCRASTINATE)
