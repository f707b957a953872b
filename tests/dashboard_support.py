"""Helpers of the dashboard tests: a client on a test database, jobs in every state laid
out with SQL, and posting forms the way a browser does (with the CSRF cookie's value)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from starlette.testclient import TestClient

from pgqueue.dashboard import DashboardConfig, create_app

Conn = psycopg.Connection[Any]


@contextmanager
def client_for(dsn: str, **settings: Any) -> Iterator[TestClient]:
    settings.setdefault("show_args", True)
    app = create_app(DashboardConfig(dsn=dsn, **settings))
    with TestClient(app, follow_redirects=False) as client:
        yield client


def csrf(client: TestClient) -> str:
    """The CSRF value the pages put in their forms (fetching a page sets the cookie)."""
    value = client.cookies.get("pgqueue_csrf")
    if value is None:
        client.get("/login")
        value = client.cookies.get("pgqueue_csrf")
    assert value is not None
    return value


def post(client: TestClient, path: str, data: dict[str, Any], **kwargs: Any) -> Any:
    return client.post(path, data={"csrf": csrf(client), **data}, **kwargs)


def add_job(conn: Conn, *, state: str = "available", task: str = "t", queue: str = "a", **cols: Any) -> int:
    """Insert one job in any state, with what that state requires (times, a lease)."""
    values: dict[str, Any] = {"state": state, "task": task, "queue": queue, "args": json.dumps(cols.pop("args", {}))}
    errors = cols.pop("errors", None)
    values.update(cols)
    if state in ("completed", "discarded", "cancelled"):
        values.setdefault("attempt", 1)
        finished = "now()"
    else:
        finished = "NULL"
    lease = "gen_random_uuid(), now() + interval '1 minute'" if state == "running" else "NULL, NULL"
    if state == "running":
        values.setdefault("attempt", 1)
    names = ", ".join(values)
    marks = ", ".join(f"%({n})s" for n in values)
    row = conn.execute(
        f"INSERT INTO pgqueue.jobs ({names}, finished_at, lease_token, lease_expires_at)"  # test-only text
        f" VALUES ({marks}, {finished}, {lease}) RETURNING id",
        values,
    ).fetchone()
    assert row is not None
    job_id = int(row[0])
    if errors is not None:
        conn.execute("UPDATE pgqueue.jobs SET errors = %s::jsonb WHERE id = %s", [json.dumps(errors), job_id])
    return job_id


def job_ids(html: str) -> list[int]:
    """The job ids of a jobs table, in page order."""
    return [int(m) for m in re.findall(r'<tr data-id="(\d+)">', html)]


def state_of(conn: Conn, job_id: int) -> str | None:
    row = conn.execute("SELECT state::text FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
    return None if row is None else str(row[0])
