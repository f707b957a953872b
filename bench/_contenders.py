"""The systems a workload compares, each behind the same small interface.

A contender knows how to create its tables, empty them, preload N no-op jobs, enqueue one
job inside a caller's transaction, count unfinished jobs, and which worker process to
start (``python -m bench.workers.<name>``). Workers run no-op handlers; with ``--report``
each handler prints ``<key> <wall clock>`` when it starts, which the latency workloads read.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]


@dataclass(frozen=True)
class Contender:
    name: str
    worker_module: str
    setup: Callable[[str], None]
    reset: Callable[[Conn], None]
    preload: Callable[[Conn, int], None]
    enqueue_one: Callable[[Conn, str, float], None]  # (conn, key, sent_at) inside caller's tx
    remaining_sql: str
    worker_args: tuple[str, ...] = ()
    needs: tuple[str, ...] = field(default=())  # importable modules it requires
    variant: bool = False  # an A/B variant: runs only when asked for by name
    checkout: str | None = None  # run its processes from this checkout of the repository (its own code)
    name_there: str | None = None  # its name inside that checkout (producers look it up by name)

    def process_cwd(self, default: Path) -> Path:
        """The directory its worker and producer processes run in (``python -m`` imports from there)."""
        return Path(self.checkout) if self.checkout else default

    def process_name(self) -> str:
        return self.name_there or self.name

    def missing(self) -> str | None:
        for module in self.needs:
            if importlib.util.find_spec(module) is None:
                return f"{module} not installed (pip install -e '.[bench]')"
        return None


# -- pgqueue -----------------------------------------------------------------------------


_PGQ_APPS: dict[float, Any] = {}


def _pgqueue_app(notify_window: float = 0.0) -> Any:
    """The bench app with its no-op task, built once per process (and NOTIFY window):
    enqueueing needs no DSN, and building it per call would bill pgqueue for set-up a real
    producer does once."""
    app = _PGQ_APPS.get(notify_window)
    if app is None:
        from bench.workers.pgqueue_worker import build_app

        app = _PGQ_APPS[notify_window] = build_app("postgresql://unused", notify_window=notify_window)
    return app


def _pgqueue_setup(dsn: str) -> None:
    from pgqueue.migrate import migrate

    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn, "pgqueue")


def _pgqueue_reset(conn: Conn) -> None:
    conn.execute("TRUNCATE pgqueue.jobs")
    conn.execute("VACUUM ANALYZE pgqueue.jobs_live")


def _pgqueue_preload(conn: Conn, n: int) -> None:
    app = _pgqueue_app()
    noop = app.tasks["bench.noop"]
    with conn.transaction():
        app.enqueue_many(conn, (noop.job() for _ in range(n)))


def _pgqueue_enqueue_one(conn: Conn, key: str, sent_at: float) -> None:
    _pgqueue_app().tasks["bench.noop"].enqueue(conn, k=key, t=sent_at)


PGQUEUE = Contender(
    name="pgqueue",
    worker_module="bench.workers.pgqueue_worker",
    setup=_pgqueue_setup,
    reset=_pgqueue_reset,
    preload=_pgqueue_preload,
    enqueue_one=_pgqueue_enqueue_one,
    remaining_sql="SELECT count(*) FROM pgqueue.jobs_live",
)


# Workflows: the same no-op jobs, preloaded as graphs, so that each completion releases the
# next jobs (`python -m bench workflows`): chains of 10 (each job waits for the one before)
# and fan-out/fan-in graphs (one job, 100 that wait for it, one that waits for the 100).
def _workflow_reset(conn: Conn) -> None:
    conn.execute("TRUNCATE pgqueue.jobs, pgqueue.job_deps")
    conn.execute("VACUUM ANALYZE pgqueue.jobs_live")


def _chain_preload(conn: Conn, n: int) -> None:
    app = _pgqueue_app()
    noop = app.tasks["bench.noop"]
    with conn.transaction():
        for _ in range(max(1, n // 10)):
            app.chain(*(noop.job() for _ in range(10))).enqueue(conn)


def _fan_preload(conn: Conn, n: int) -> None:
    app = _pgqueue_app()
    noop = app.tasks["bench.noop"]
    with conn.transaction():
        for _ in range(max(1, n // 102)):
            app.group(noop.job()).then(*(noop.job() for _ in range(100))).then(noop.job()).enqueue(conn)


PGQUEUE_CHAIN = dataclasses.replace(
    PGQUEUE, name="pgqueue-chain10", reset=_workflow_reset, preload=_chain_preload, variant=True
)
PGQUEUE_FAN = dataclasses.replace(
    PGQUEUE, name="pgqueue-fan100", reset=_workflow_reset, preload=_fan_preload, variant=True
)

# pgqueue on uvloop's event loop (`--contenders pgqueue,pgqueue-uvloop`).
PGQUEUE_UVLOOP = dataclasses.replace(
    PGQUEUE, name="pgqueue-uvloop", worker_args=("--uvloop", "1"), needs=("uvloop",), variant=True
)


# pgqueue's producers with a 10 ms NOTIFY window (App(notify_window=0.01)): a producer
# enqueueing faster than that notifies about once per window (`bench enqueue --contenders
# pgqueue,pgqueue-window`; `bench notify` shows what that buys the database itself).
def _window_enqueue_one(conn: Conn, key: str, sent_at: float) -> None:
    _pgqueue_app(notify_window=0.01).tasks["bench.noop"].enqueue(conn, k=key, t=sent_at)


PGQUEUE_WINDOW = dataclasses.replace(PGQUEUE, name="pgqueue-window", enqueue_one=_window_enqueue_one, variant=True)

# pgqueue whose handler returns a small dict, stored as each job's result: what results
# cost the completion (`--contenders pgqueue,pgqueue-result`).
PGQUEUE_RESULT = dataclasses.replace(PGQUEUE, name="pgqueue-result", worker_args=("--result", "1"), variant=True)

# pgqueue-result with another process waiting for every job's result (bench/workers/awaiter.py):
# the jobs are loaded as scheduled, the awaiter marks them all awaited (READY), then they
# become available in one commit, which starts the clock. The awaiter's backend counts in
# the server CPU; it must have got every result when the run is reset.
_awaiter: list[subprocess.Popen[str]] = []


def _awaited_preload(conn: Conn, n: int) -> None:
    app = _pgqueue_app()
    noop = app.tasks["bench.noop"].options(delay=3600)
    with conn.transaction():
        app.enqueue_many(conn, (noop.job() for _ in range(n)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.workers.awaiter", "--dsn", conn.info.dsn, "--count", str(n)],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        text=True,
    )
    _awaiter.append(proc)
    assert proc.stdout is not None
    if proc.stdout.readline() != "READY\n":
        raise RuntimeError("the awaiter did not start")
    with conn.transaction():
        conn.execute("UPDATE pgqueue.jobs_live SET state = 'available', run_at = now() WHERE state = 'scheduled'")
        conn.execute("SELECT pg_notify('pgqueue_wakeup', 'default')")


def _awaited_reset(conn: Conn) -> None:
    while _awaiter:
        proc = _awaiter.pop()
        out, _ = proc.communicate(timeout=300)
        if proc.returncode != 0 or " errors=0" not in out:
            raise RuntimeError(f"the awaiter did not get every result: {out.strip()!r} (exit {proc.returncode})")
    _pgqueue_reset(conn)


PGQUEUE_AWAITED = dataclasses.replace(
    PGQUEUE_RESULT, name="pgqueue-awaited", preload=_awaited_preload, reset=_awaited_reset
)

# pgqueue with the claim cursor off (pgqueue/_claim_cursor.py): an A/B variant for xmin.
PGQUEUE_NO_CURSOR = dataclasses.replace(
    PGQUEUE, name="pgqueue-nocursor", worker_args=("--claim-cursor-threshold", "0"), variant=True
)


# -- raw SQL ceiling ---------------------------------------------------------------------
# The same claim/complete a queue must do, with nothing else: a table, a partial index,
# FOR UPDATE SKIP LOCKED, and a DELETE to complete. No leases, retries or bookkeeping.

RAW_DDL = """
CREATE SCHEMA IF NOT EXISTS bench_raw;
CREATE TABLE IF NOT EXISTS bench_raw.jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL DEFAULT 'default',
    args jsonb NOT NULL DEFAULT '{}',
    state smallint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS jobs_fetch ON bench_raw.jobs (queue, id) WHERE state = 0;
"""


def _raw_setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RAW_DDL)


def _raw_reset(conn: Conn) -> None:
    conn.execute("TRUNCATE bench_raw.jobs")
    conn.execute("VACUUM ANALYZE bench_raw.jobs")


def _raw_preload(conn: Conn, n: int) -> None:
    with conn.transaction(), conn.cursor() as cur, cur.copy("COPY bench_raw.jobs (args) FROM STDIN") as copy:
        for _ in range(n):
            copy.write_row(("{}",))
    conn.execute("NOTIFY bench_raw")


def _raw_enqueue_one(conn: Conn, key: str, sent_at: float) -> None:
    # One round trip: the insert and its wake-up.
    conn.execute(
        "WITH ins AS (INSERT INTO bench_raw.jobs (args) VALUES (%s::jsonb) RETURNING id)"
        " SELECT pg_notify('bench_raw', '') FROM ins",
        [json.dumps({"k": key, "t": sent_at})],
    )


def raw(batch: int) -> Contender:
    """The raw-SQL loop claiming (and deleting) up to ``batch`` jobs per round trip."""
    return Contender(
        name=f"raw-sql-b{batch}",
        worker_module="bench.workers.raw_worker",
        setup=_raw_setup,
        reset=_raw_reset,
        preload=_raw_preload,
        enqueue_one=_raw_enqueue_one,
        remaining_sql="SELECT count(*) FROM bench_raw.jobs",
        worker_args=("--batch", str(batch)),
    )


RAW_1 = raw(1)
RAW_100 = raw(100)
RAW_NAME = re.compile(r"raw-sql-b([1-9][0-9]*)")

CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in (
        PGQUEUE, PGQUEUE_NO_CURSOR, PGQUEUE_RESULT, PGQUEUE_AWAITED, PGQUEUE_CHAIN, PGQUEUE_FAN, PGQUEUE_UVLOOP,
        PGQUEUE_WINDOW,
        RAW_1, RAW_100,
    )
}  # fmt: skip

# pgqueue as of another revision, for before/after comparisons in one run: point
# $PGQUEUE_BENCH_BASELINE at a checkout of it (e.g. `git worktree add /tmp/base <rev>`) and ask
# for `--contenders pgqueue,pgqueue-baseline`. Its workers and producers run that checkout's
# code; tables are set up and preloaded by this one, so both must share the schema version.
_BASELINE = os.environ.get("PGQUEUE_BENCH_BASELINE")
if _BASELINE:
    CONTENDERS["pgqueue-baseline"] = dataclasses.replace(
        PGQUEUE, name="pgqueue-baseline", variant=True, checkout=_BASELINE, name_there="pgqueue"
    )

# More revisions at once: $PGQUEUE_BENCH_CHECKOUTS="main=/tmp/main,pre-flow=/tmp/base" adds the
# variants pgqueue@main and pgqueue@pre-flow, each running its own checkout like the baseline.
for _item in filter(None, os.environ.get("PGQUEUE_BENCH_CHECKOUTS", "").split(",")):
    _label, _, _path = _item.partition("=")
    if not _label or not _path:
        raise ValueError(f"PGQUEUE_BENCH_CHECKOUTS: expected NAME=PATH[,NAME=PATH...], got {_item!r}")
    CONTENDERS[f"pgqueue@{_label}"] = dataclasses.replace(
        PGQUEUE, name=f"pgqueue@{_label}", variant=True, checkout=_path, name_there="pgqueue"
    )


def register(contender: Contender) -> None:
    CONTENDERS[contender.name] = contender


def get(names: list[str] | None) -> list[Contender]:
    """The contenders asked for (all known ones but variants by default)."""
    _load_peers()
    if not names:
        return [c for c in CONTENDERS.values() if not c.variant]
    unknown = [n for n in names if n not in CONTENDERS and not RAW_NAME.fullmatch(n)]
    if unknown:
        known = ", ".join([*CONTENDERS, "raw-sql-bN"])
        raise ValueError(f"unknown contender(s) {', '.join(unknown)}; known: {known}")
    # raw-sql-bN: the raw loop at any batch size, e.g. the concurrency a pgqueue run uses.
    return [CONTENDERS.get(n) or raw(int(n.removeprefix("raw-sql-b"))) for n in names]


def _load_peers() -> None:
    # Peers register themselves when their module imports (bench/peers.py), if present.
    if importlib.util.find_spec("bench.peers") is not None:
        importlib.import_module("bench.peers")
