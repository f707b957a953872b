"""Structured logging (--log-format kv|json) and the rule that job args stay out of logs."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.logging_setup import make_formatter
from tests.conftest import async_wait_until, running_worker

Conn = psycopg.Connection[Any]
SECRET = "hunter2-do-not-log"


def parse_kv(line: str) -> dict[str, str]:
    """Parse a logfmt line (values bare or JSON-quoted)."""
    out: dict[str, str] = {}
    for key, quoted, bare in re.findall(r'(\w+)=(?:("(?:[^"\\]|\\.)*")|(\S*))', line):
        out[key] = json.loads(quoted) if quoted else bare
    return out


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("pgqueue.worker")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield stream, handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@pytest.mark.parametrize("fmt", ["kv", "json", "text"])
async def test_job_args_are_logged_only_when_the_task_opts_in(
    app: pgqueue.App, conn: Conn, captured: tuple[io.StringIO, logging.Handler], fmt: str
) -> None:
    stream, handler = captured
    handler.setFormatter(make_formatter(fmt))

    @app.task(name="quiet")
    def quiet(password: str) -> None: ...

    @app.task(name="chatty", log_args=True)
    def chatty(note: str) -> None: ...

    @app.task(name="fails", max_attempts=1)
    def fails(password: str) -> None:
        raise KeyError("missing")

    quiet_id = quiet.enqueue(conn, password=SECRET)
    chatty_id = chatty.enqueue(conn, note="visible-note")
    fails_id = fails.enqueue(conn, password=SECRET)
    async with running_worker(app) as worker:
        await async_wait_until(lambda: worker.stats.completed == 2 and worker.stats.discarded == 1)
    out = stream.getvalue()
    assert SECRET not in out
    assert "visible-note" in out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    by_job: dict[int, dict[str, Any]] = {}
    for line in lines:
        if fmt == "json":
            doc = json.loads(line)
        elif fmt == "kv":
            doc = parse_kv(line)
        else:
            continue
        if "job_id" in doc:
            by_job[int(doc["job_id"])] = doc
    if fmt == "text":
        assert any(f"job {quiet_id} quiet" in ln for ln in lines)
        return
    assert set(by_job) == {quiet_id, chatty_id, fails_id}
    assert by_job[quiet_id]["state"] == "completed"
    assert by_job[quiet_id]["task"] == "quiet"
    assert "job_args" not in by_job[quiet_id]
    assert "job_args" not in by_job[fails_id]
    assert by_job[fails_id]["state"] == "discarded"
    assert by_job[fails_id]["error_type"] == "builtins.KeyError"
    assert float(by_job[chatty_id]["duration_ms"]) >= 0
    chatty_args = by_job[chatty_id]["job_args"]
    assert (json.loads(chatty_args) if fmt == "kv" else chatty_args) == {"note": "visible-note"}
