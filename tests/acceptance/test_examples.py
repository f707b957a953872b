"""The example projects of examples/, run end to end as a user would run them: the plain
script, the FastAPI app under uvicorn, the Django project through manage.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import REPO, wait_until

EXAMPLES = REPO / "examples"


def env_for(dsn: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PGQUEUE_DSN": dsn, "PYTHONPATH": str(REPO), **extra}
    env.pop("PGQUEUE_SCHEMA", None)
    return env


def run(args: list[str], cwd: Path, dsn: str, **extra: str) -> str:
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env_for(dsn, **extra), capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@dataclass
class Served:
    proc: subprocess.Popen[str]
    output: str = ""


@contextmanager
def serving(args: list[str], cwd: Path, dsn: str, ok: tuple[int, ...] = (0,), **extra: str) -> Iterator[Served]:
    """A long-running process, stopped with SIGTERM at the end (it must exit with one of ``ok``)."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd,
        env=env_for(dsn, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    served = Served(proc)
    try:
        yield served
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise AssertionError(f"{args} did not stop on SIGTERM:\n{out}") from None
    assert proc.returncode in ok, f"{args} exited {proc.returncode}:\n{out}"
    served.output = out


def test_plain_script(empty_dsn: str) -> None:
    out = run(["main.py"], EXAMPLES / "plain_script", empty_dsn)
    lines = out.strip().splitlines()
    assert len(lines) == 5, out
    assert "{'bytes': 16000, 'photo_id': 4}" in lines[3]
    assert "failed" in lines[4]
    assert "bad size 0" in lines[4]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(method: str, url: str) -> Any:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as resp:
        return json.loads(resp.read())


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True  # it answered (404 is fine)
    except OSError:
        return False
    return True


def test_fastapi_app(dsn: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    uvicorn = ["-m", "uvicorn", "app:api", "--port", str(port), "--log-level", "info"]
    # uvicorn shuts down gracefully on SIGTERM, then ends by that signal.
    with serving(uvicorn, EXAMPLES / "fastapi_app", dsn, ok=(0, -signal.SIGTERM)) as server:
        wait_until(lambda: answers(f"{base}/orders/0") or server.proc.poll() is not None, timeout=60)
        assert server.proc.poll() is None, "uvicorn exited at startup"
        created = http("POST", f"{base}/orders/1")
        assert created["order"] == 1
        done = wait_until(lambda: (o := http("GET", f"{base}/orders/1"))["confirmed"] and o, timeout=30)
        assert done == {"order": 1, "confirmed": True, "result": "order 1 confirmed"}
    assert "Application shutdown complete" in server.output  # the lifespan stopped the worker


def test_django_project(empty_dsn: str) -> None:
    project = EXAMPLES / "django_project"
    run(["manage.py", "migrate", "-v", "0"], project, empty_dsn)  # installs pgqueue's schema too
    placed = run(["manage.py", "place_order", "1", "ann@example.com"], project, empty_dsn)
    task_id = placed.split("task ")[1].strip()
    assert "rolled back" in run(["manage.py", "place_order", "2", "bob@example.com", "--fail"], project, empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (1,)  # the failed order left none

        def confirmed() -> bool:
            row = conn.execute("SELECT confirmed FROM shop_order WHERE id = 1").fetchone()
            conn.rollback()
            return bool(row and row[0])

        with serving(["manage.py", "pgqueue_work", "--concurrency", "2"], project, empty_dsn):
            wait_until(confirmed, timeout=60)
        assert conn.execute("SELECT count(*) FROM shop_order").fetchone() == (1,)
    listing = run(["manage.py", "pgqueue", "jobs", "list", "--state", "completed"], project, empty_dsn)
    assert task_id in listing
    view = run(
        [
            "manage.py",
            "shell",
            "-c",
            f"from django.test import Client; print(Client().get('/orders/1?task={task_id}').content.decode())",
        ],
        project,
        empty_dsn,
    )
    assert json.loads(view.strip().splitlines()[-1]) == {
        "order": 1,
        "status": "SUCCESSFUL",
        "result": {"order": 1, "mailed": "ann@example.com"},
    }


@pytest.mark.parametrize("name", ["plain_script", "fastapi_app", "django_project"])
def test_examples_are_listed(name: str) -> None:
    assert f"({name})" in (EXAMPLES / "README.md").read_text("utf-8")
    assert f"(examples/{name})" in (REPO / "README.md").read_text("utf-8")
