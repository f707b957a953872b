"""``pgqueue work`` started before its database is reachable: it waits with backoff, one
line per attempt, and a stop during the wait ends it cleanly at once.

The database sits behind a :class:`GateProxy` that refuses connections until opened.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.apps.support import create_test_tables, enqueue_sql, state_of, worker_process
from tests.conftest import wait_until
from tests.gate_proxy import GateProxy

SECRET = "never-log-this-password"


@pytest.fixture
def gate(dsn: str) -> Iterator[GateProxy]:
    info = conninfo_to_dict(dsn)
    with GateProxy(str(info.get("host") or "127.0.0.1"), int(str(info.get("port") or 5432))) as proxy:
        yield proxy


def gated_dsn(dsn: str, gate: GateProxy) -> str:
    """``dsn`` through the gate, with a password to check it never shows (trust auth
    ignores it; a password already in ``dsn`` is kept)."""
    password = conninfo_to_dict(dsn).get("password") or SECRET
    return make_conninfo(dsn, host="127.0.0.1", port=gate.port, password=password)


def attempts(output: str) -> list[str]:
    return [line for line in output.splitlines() if "cannot reach the database at" in line]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_work_waits_for_the_database_then_runs_jobs(
    dsn: str, conn: psycopg.Connection[Any], gate: GateProxy, tmp_path: Path, processes: str
) -> None:
    create_test_tables(conn)
    job_id = enqueue_sql(conn, "record", '{"key": "after-wait"}')
    target = gated_dsn(dsn, gate)
    password = str(conninfo_to_dict(target)["password"])
    with worker_process(
        target, "tests.apps.basic:app", "--processes", processes, "--poll-interval", "0.2", log=tmp_path / "w.log"
    ) as w:
        wait_until(lambda: len(attempts(w.output())) >= 2, timeout=30)
        lines = attempts(w.output())
        where = f"host=127.0.0.1 port={gate.port} dbname={conn.info.dbname}"
        assert f"cannot reach the database at {where} (attempt 1): " in lines[0], lines[0]
        assert lines[0].endswith("retrying in 0.5s"), lines[0]
        assert "(attempt 2)" in lines[1], lines[1]
        assert lines[1].endswith("retrying in 1.0s"), lines[1]
        assert "refused" in lines[0], lines[0]  # the error itself
        assert state_of(conn, job_id) == "available"
        gate.open()
        wait_until(lambda: state_of(conn, job_id) == "completed", timeout=60)
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.output()
    assert password not in w.output()
    assert "Traceback" not in w.output()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_stop_during_the_wait_exits_cleanly_at_once(
    dsn: str, gate: GateProxy, tmp_path: Path, signum: int, processes: str
) -> None:
    with worker_process(
        gated_dsn(dsn, gate), "tests.apps.basic:app", "--processes", processes, log=tmp_path / "w.log"
    ) as w:
        wait_until(lambda: attempts(w.output()), timeout=30)
        w.signal(signum)
        # The next attempt is 0.5 s away at most, the one after 1 s: "at once" is well
        # before the backoff could have reached the database (it never opens).
        assert w.wait(10) == 0, w.output()
    assert "Traceback" not in w.output()
    assert "stopped before" in w.output()
